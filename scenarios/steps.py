"""Conversation actions: what a client does (``scenario >> Chat(...)``); fault actions
live in :mod:`scenarios.fault_steps`.

Conversation steps keep a visible history per conversation, as a chat client does: a
successful answer is appended as the assistant message; a failed one is not.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from scenarios.client import RelayConnection
from scenarios.core import (
    Action,
    Ctx,
    ExpectationFailed,
    Placeholder,
    Turn,
    matches,
    resolve,
    short,
)
from scenarios.faults import network
from scenarios.responses_answer import compare_with_upstream, parse_responses_answer

DEFAULT_MODEL = "gpt-5"
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


# --- conversation ------------------------------------------------------------------------


@dataclass
class Chat(Action):
    """Send a user turn (``text``; None sends the history as it stands).

    ``hold=N`` reads N frames and keeps the stream open for later steps (Resume,
    Disconnect, Stall, KillRelay). ``rcvbuf`` shrinks the client's receive buffer.
    ``model`` (``gpt-5``, or ``provider/model`` for a ``RelayOptions.providers`` entry)
    sticks to the conversation: its later turns (AnswerTools, Regenerate, Edit) use it too.
    """

    text: str | None = None
    conv: str = "main"
    name: str | None = None
    stream: bool = True
    tools: bool = False
    hold: int | None = None
    rcvbuf: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    model: str | None = None

    def run(self, ctx: Ctx) -> None:
        history = ctx.history_of(self.conv)
        if self.text is not None:
            history.append({"role": "user", "content": self.text})
        send_turn(ctx, self, list(history))


def send_turn(ctx: Ctx, step: Chat, messages: list[dict[str, Any]]) -> Turn:
    model = ctx.models[step.conv] = step.model or ctx.models.get(step.conv, DEFAULT_MODEL)
    body: dict[str, Any] = {"model": model, "messages": resolve(messages)}
    body["stream"] = step.stream
    if step.tools:
        body["tools"] = TOOLS
    body.update(step.extra)
    return post_turn(ctx, step.name, step.conv, body, hold=step.hold, rcvbuf=step.rcvbuf)


def post_turn(
    ctx: Ctx,
    name: str | None,
    conv: str,
    body: dict[str, Any],
    *,
    hold: int | None = None,
    rcvbuf: int | None = None,
) -> Turn:
    """POST ``body`` to ``/chat/completions`` as turn ``name`` of ``conv`` (any shape the
    relay takes there); the answer joins the conversation (see :func:`finish_turn`)."""
    name = name or ctx.next_turn_name()
    stream = body.get("stream") is True
    relay = ctx.harness.require_relay()
    turn = Turn(name, conv, body, upstream_from=ctx.upstream_count())
    with ctx.lock:
        ctx.turns[name] = turn
        ctx.last_turn = name
    ctx.harness.history.record(
        "client_request", turn=name, conversation=conv, stream=stream, body=body
    )
    conn = RelayConnection(relay.base_url, ctx.harness.relay_token, rcvbuf=rcvbuf)
    conn.send_request("POST", "/chat/completions", json.dumps(body).encode("utf-8"))
    turn.conn = conn
    if hold is not None:
        conn.read_head()
        conn.read_frames(hold)
        return turn
    conn.read_head()
    finish_turn(ctx, turn, conn.read_all())
    return turn


def finish_turn(ctx: Ctx, turn: Turn, answer: Any) -> None:
    turn.answer = answer
    turn.conn = None
    # Every call the turn caused reached the fake before its answer ended: later calls
    # (a regeneration with the same last user text, say) are not this turn's.
    turn.upstream_to = ctx.upstream_count()
    ctx.harness.history.record("client_answer", turn=turn.name, **answer.summary())
    if answer.outcome == "success":
        with ctx.lock:
            ctx.history_of(turn.conversation).append(answer.assistant_message())
    ctx.harness.sync_upstream()


@dataclass
class Regenerate(Action):
    """Re-send the last turn of a conversation without its assistant answer."""

    conv: str = "main"
    name: str | None = None
    stream: bool = True

    def run(self, ctx: Ctx) -> None:
        history = ctx.history_of(self.conv)
        if history and history[-1]["role"] == "assistant":
            history.pop()
        send_turn(ctx, Chat(None, self.conv, self.name, self.stream), list(history))


@dataclass
class Edit(Action):
    """Edit the ``user_turn``-th user message (0-based), drop what followed, re-send."""

    user_turn: int
    text: str
    conv: str = "main"
    name: str | None = None
    stream: bool = True

    def run(self, ctx: Ctx) -> None:
        history = ctx.history_of(self.conv)
        users = [i for i, m in enumerate(history) if m["role"] == "user"]
        if self.user_turn >= len(users):
            raise ExpectationFailed(f"conversation {self.conv} has only {len(users)} user turns")
        cut = users[self.user_turn]
        del history[cut:]
        history.append({"role": "user", "content": self.text})
        send_turn(ctx, Chat(None, self.conv, self.name, self.stream), list(history))


@dataclass
class AnswerTools(Action):
    """Answer every tool call of the last assistant message, then send the turn."""

    result: str | dict[str, str] | list[str] = "ok"  # one for all, by name, or by call order
    conv: str = "main"
    name: str | None = None
    stream: bool = True
    call_id: Placeholder | None = None  # captures the (first) call id

    def run(self, ctx: Ctx) -> None:
        history = ctx.history_of(self.conv)
        last = history[-1] if history else {}
        calls = last.get("tool_calls") or []
        if last.get("role") != "assistant" or not calls:
            raise ExpectationFailed("AnswerTools: the last message made no tool calls")
        for index, call in enumerate(calls):
            name = call["function"]["name"]
            if isinstance(self.result, str):
                output = self.result
            else:
                output = self.result[index] if isinstance(self.result, list) else self.result[name]
            history.append({"role": "tool", "tool_call_id": call["id"], "content": output})
        if self.call_id is not None and not matches(self.call_id, calls[0]["id"]):
            raise ExpectationFailed(f"AnswerTools: call id {calls[0]['id']!r} != {self.call_id}")
        send_turn(ctx, Chat(None, self.conv, self.name, self.stream, tools=True), list(history))


ECHO_FORMS = ("string", "parts", "null", "empty", "absent")


@dataclass
class EchoAs(Action):
    """Rewrite how the client echoes its last assistant message back (sends nothing).

    ``string``: content as one string; ``parts``: an array of text parts (split at
    ``split``, a character offset, when given); ``null`` / ``empty`` / ``absent``: content
    ``None``, ``""`` or no content key (for messages whose text is empty: tool calls).
    """

    form: str
    conv: str = "main"
    split: int | None = None

    def run(self, ctx: Ctx) -> None:
        if self.form not in ECHO_FORMS:
            raise ValueError(f"EchoAs: form must be one of {ECHO_FORMS}, got {self.form!r}")
        history = ctx.history_of(self.conv)
        if not history or history[-1].get("role") != "assistant":
            raise ExpectationFailed(f"EchoAs: conversation {self.conv} ends with no answer")
        message = history[-1]
        text = message.get("content") or ""
        if isinstance(text, list):
            text = "".join(part["text"] for part in text)
        if self.form in ("null", "empty", "absent") and text:
            raise ExpectationFailed(f"EchoAs({self.form!r}) would drop the answer's text")
        message.pop("content", None)
        if self.form == "string":
            message["content"] = text
        elif self.form == "parts":
            cuts = [text] if self.split is None else [text[: self.split], text[self.split :]]
            message["content"] = [{"type": "text", "text": piece} for piece in cuts]
        elif self.form != "absent":
            message["content"] = None if self.form == "null" else ""


@dataclass
class KeepReasoning(Action):
    """The client keeps the ``reasoning_content`` it was shown with its last answer in
    that assistant message, so later turns send it back (clients other than Cursor do;
    by default the scenario client drops it, as Cursor does). Sends nothing."""

    conv: str = "main"

    def run(self, ctx: Ctx) -> None:
        history = ctx.history_of(self.conv)
        answers = [
            turn.answer
            for turn in ctx.turns.values()
            if turn.conversation == self.conv and turn.answer and turn.answer.outcome == "success"
        ]
        if not history or history[-1].get("role") != "assistant" or not answers:
            raise ExpectationFailed(f"KeepReasoning: conversation {self.conv} ends with no answer")
        if not answers[-1].reasoning:
            raise ExpectationFailed("KeepReasoning: the last answer showed no reasoning_content")
        history[-1]["reasoning_content"] = answers[-1].reasoning


@dataclass
class Branch(Action):
    """Continue from ``turn``'s answer: the conversation becomes that turn's request
    messages plus the answer as the client kept it (partial text of a failed turn
    included). ``conv`` (default: the turn's own) receives the copy; sends nothing."""

    turn: str
    conv: str | None = None

    def run(self, ctx: Ctx) -> None:
        source = ctx.turn(self.turn)
        if source.answer is None:
            raise ExpectationFailed(f"Branch: turn {source.name} has no answer yet")
        messages = json.loads(json.dumps(source.body.get("messages", [])))
        messages.append(source.answer.assistant_message())
        with ctx.lock:
            ctx.conversations[self.conv or source.conversation] = messages


@dataclass(init=False)
class Concurrently(Action):
    """Run several turns at once (each in its own thread and, usually, conversation):
    ``Chat``, ``Regenerate`` or any other conversation action."""

    turns: tuple[Action, ...]

    def __init__(self, *turns: Action) -> None:
        self.turns = turns

    def run(self, ctx: Ctx) -> None:
        with ThreadPoolExecutor(max_workers=len(self.turns)) as pool:
            for future in [pool.submit(turn.run, ctx) for turn in self.turns]:
                future.result()


@dataclass
class Resume(Action):
    """Read a held stream to its end."""

    name: str | None = None

    def run(self, ctx: Ctx) -> None:
        turn = ctx.turn(self.name)
        assert turn.conn is not None, f"turn {turn.name} holds no open stream"
        finish_turn(ctx, turn, turn.conn.read_all())


@dataclass
class ReadSlowly(Action):
    """Read a held stream to its end in small, paced reads (a slow client)."""

    name: str | None = None
    bytes_per_read: int = 64
    pause_s: float = 0.005
    timeout: float = 20.0
    rcvbuf: int | None = None  # resize the receive buffer first (a reader that speeds up)

    def run(self, ctx: Ctx) -> None:
        turn = ctx.turn(self.name)
        assert turn.conn is not None
        if self.rcvbuf is not None:
            turn.conn.set_rcvbuf(self.rcvbuf)
        answer = network.slow_read(turn.conn, self.bytes_per_read, self.pause_s, self.timeout)
        finish_turn(ctx, turn, answer)


@dataclass
class Stall(Action):
    """Stop reading a held stream until the relay is blocked writing to us."""

    name: str | None = None

    def run(self, ctx: Ctx) -> None:
        turn = ctx.turn(self.name)
        assert turn.conn is not None
        queued = network.stall_until_blocked(turn.conn)
        ctx.harness.record_fault("client_stall", turn=turn.name, unread_bytes=queued)


@dataclass
class Disconnect(Action):
    """Leave a held stream mid-answer (RST by default)."""

    name: str | None = None
    reset: bool = True

    def run(self, ctx: Ctx) -> None:
        turn = ctx.turn(self.name)
        assert turn.conn is not None
        ctx.harness.record_fault("client_disconnect", turn=turn.name, reset=self.reset)
        finish_turn(ctx, turn, turn.conn.disconnect(reset=self.reset))


# --- upstream --------------------------------------------------------------------------------


@dataclass(init=False)
class Upstream(Action):
    """Queue what the fake upstream does for its next calls (FIFO)."""

    scripts: tuple[dict[str, Any], ...]

    def __init__(self, *scripts: dict[str, Any]) -> None:
        self.scripts = scripts

    def run(self, ctx: Ctx) -> None:
        assert ctx.harness.fake is not None
        ctx.harness.fake.script(*self.scripts)

    def describe(self) -> str:
        scripts = (short(json.dumps(script, sort_keys=True), 100) for script in self.scripts)
        return f"Upstream({', '.join(scripts)})"


@dataclass
class FakeStrict(Action):
    """Switch the fake Chat provider's strictness rule (``tool_turns``,
    ``tool_turns_indexed``, ``kimi``, ``all_turns_with_tools``, ``legacy_rejects``,
    ``off``); ``prefix`` wraps its error text as some gateways do."""

    rule: str
    prefix: bool = False

    def run(self, ctx: Ctx) -> None:
        assert ctx.harness.fake is not None
        ctx.harness.fake.set_strict(self.rule, self.prefix)


@dataclass
class RotateUpstreamKey(Action):
    """The fake upstream seals with a new key: every earlier token is refused, as OpenAI
    refuses replayed content after its encryption key rotated."""

    def run(self, ctx: Ctx) -> None:
        assert ctx.harness.fake is not None
        ctx.harness.fake.rotate_key()


@dataclass
class PostRaw(Action):
    """Send raw bytes to the relay (bad input, oversized or chunked uploads)."""

    body: bytes
    name: str | None = None
    chunked: bool = False
    piece_bytes: int = 4096
    headers: dict[str, str] = field(default_factory=dict)
    path: str = "/chat/completions"

    def run(self, ctx: Ctx) -> None:
        relay = ctx.harness.require_relay()
        name = self.name or ctx.next_turn_name()
        turn = Turn(name, "raw", {"raw_bytes": len(self.body)}, upstream_from=ctx.upstream_count())
        with ctx.lock:
            ctx.turns[name] = turn
            ctx.last_turn = name
        ctx.harness.history.record(
            "client_request",
            turn=name,
            conversation="raw",
            stream=False,
            body={"raw_bytes": len(self.body), "head": self.body[:80].decode("latin-1")},
            json=_small_json(self.body),
        )
        conn = RelayConnection(relay.base_url, ctx.harness.relay_token)
        pieces = [
            self.body[i : i + self.piece_bytes] for i in range(0, len(self.body), self.piece_bytes)
        ]
        conn.send_request(
            "POST",
            self.path,
            pieces,
            headers=self.headers,
            chunked=self.chunked,
            content_length=None if self.chunked else len(self.body),
        )
        conn.read_head()
        finish_turn(ctx, turn, conn.read_all())


def _small_json(raw: bytes, limit: int = 65536) -> Any:
    """The ``model`` and ``messages`` of a raw body that is small, parses and is an object
    (the checker sees what the client itself sent), else None."""
    if len(raw) > limit:
        return None
    try:
        body = json.loads(raw)
        if not isinstance(body, dict):
            return None
        kept = {key: body[key] for key in ("model", "messages") if key in body}
        json.dumps(kept)  # the history must be able to write it
    except (ValueError, RecursionError):
        return None
    return kept


@dataclass
class DirectResponses(Action):
    """A direct Responses API client: ``POST /v1/responses`` through the relay (relay
    token; the body goes upstream as sent). The answer must be a valid Responses stream
    or object that forwards exactly what the upstream sent (else its outcome is
    ``malformed``); its history record carries ``endpoint="responses"``."""

    input: str | list[dict[str, Any]]
    user: str | None = None
    stream: bool = True
    model: str = DEFAULT_MODEL
    name: str | None = None

    def run(self, ctx: Ctx) -> None:
        body: dict[str, Any] = {"model": self.model, "input": self.input, "stream": self.stream}
        if self.user is not None:
            body["user"] = self.user
        name = self.name or ctx.next_turn_name()
        turn = Turn(name, "responses", body, upstream_from=ctx.upstream_count())
        with ctx.lock:
            ctx.turns[name] = turn
            ctx.last_turn = name
        ctx.harness.history.record(
            "client_request", turn=name, conversation="responses", stream=self.stream,
            body=body, endpoint="responses",
        )  # fmt: skip
        conn = RelayConnection(ctx.harness.require_relay().base_url, ctx.harness.relay_token)
        conn.send_request("POST", "/responses", json.dumps(body).encode("utf-8"))
        conn.read_head()
        conn.read_all()
        answer = parse_responses_answer(
            conn.status, conn.headers, bytes(conn.raw_body), stream=self.stream
        )
        fake = ctx.harness.fake
        if answer.status == 200 and fake is not None and ctx.upstream_count() > turn.upstream_from:
            fake.wait_for_end()  # every event the fake sent is in its record
            sent = fake.requests()[-1].get("events") or []
            compare_with_upstream(answer, list(sent), self.stream)
        finish_turn(ctx, turn, answer)
