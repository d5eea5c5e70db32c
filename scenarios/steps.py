"""Actions: what a scenario makes happen (``scenario >> Action(...)``).

Conversation steps keep a visible history per conversation, as a chat client does: a
successful answer is appended as the assistant message; a failed one is not.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from scenarios.client import RelayConnection
from scenarios.core import Action, Ctx, ExpectationFailed, Placeholder, Turn, resolve, short
from scenarios.faults import crash, network
from scenarios.faults.disk import eio_on_writes, fiu_ctrl
from scenarios.wait import wait_until

DEFAULT_MODEL = "gpt-5"
TOOLS = [
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
    """

    text: str | None = None
    conv: str = "main"
    name: str | None = None
    stream: bool = True
    tools: bool = False
    hold: int | None = None
    rcvbuf: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def run(self, ctx: Ctx) -> None:
        history = ctx.history_of(self.conv)
        if self.text is not None:
            history.append({"role": "user", "content": self.text})
        send_turn(ctx, self, list(history))


def send_turn(ctx: Ctx, step: Chat, messages: list[dict[str, Any]]) -> Turn:
    body: dict[str, Any] = {"model": DEFAULT_MODEL, "messages": resolve(messages)}
    body["stream"] = step.stream
    if step.tools:
        body["tools"] = TOOLS
    body.update(step.extra)
    name = step.name or ctx.next_turn_name()
    relay = ctx.harness.require_relay()
    turn = Turn(name, step.conv, body, upstream_from=ctx.upstream_count())
    with ctx.lock:
        ctx.turns[name] = turn
        ctx.last_turn = name
    ctx.harness.history.record(
        "client_request", turn=name, conversation=step.conv, stream=step.stream, body=body
    )
    conn = RelayConnection(relay.base_url, ctx.harness.relay_token, rcvbuf=step.rcvbuf)
    conn.send_request("POST", "/chat/completions", json.dumps(body).encode("utf-8"))
    turn.conn = conn
    if step.hold is not None:
        conn.read_head()
        conn.read_frames(step.hold)
        return turn
    conn.read_head()
    finish_turn(ctx, turn, conn.read_all())
    return turn


def finish_turn(ctx: Ctx, turn: Turn, answer: Any) -> None:
    turn.answer = answer
    turn.conn = None
    turn.upstream_to = None
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

    result: str | dict[str, str] = "ok"
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
        for call in calls:
            name = call["function"]["name"]
            output = self.result if isinstance(self.result, str) else self.result[name]
            history.append({"role": "tool", "tool_call_id": call["id"], "content": output})
        if self.call_id is not None and not self.call_id.bound:
            self.call_id.bind(calls[0]["id"])
        send_turn(ctx, Chat(None, self.conv, self.name, self.stream, tools=True), list(history))


@dataclass(init=False)
class Concurrently(Action):
    """Run several turns at once (each in its own thread and, usually, conversation)."""

    turns: tuple[Chat, ...]

    def __init__(self, *turns: Chat) -> None:
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
        return f"Upstream({', '.join(short(json.dumps(s, sort_keys=True), 100) for s in self.scripts)})"


# --- process faults ---------------------------------------------------------------------------


@dataclass
class KillRelay(Action):
    """SIGKILL the relay now, or once the upstream sent N events of the current call."""

    after_upstream_events: int | None = None

    def run(self, ctx: Ctx) -> None:
        if self.after_upstream_events is not None:
            crash.kill_after_upstream_events(ctx.harness, self.after_upstream_events)
        else:
            ctx.harness.kill_relay()


@dataclass
class RestartRelay(Action):
    """Stop (or ``kill`` -9) the relay and start it again, optionally changed."""

    kill: bool = False
    cache: bool | None = None
    crash_at: str | None = None

    def run(self, ctx: Ctx) -> None:
        changes: dict[str, Any] = {"crash_at": self.crash_at}
        if self.cache is not None:
            changes["cache_enabled"] = self.cache
        ctx.harness.restart_relay(kill=self.kill, **changes)


@dataclass
class AwaitCrash(Action):
    """Wait for the relay to SIGKILL itself at its armed crash point."""

    timeout: float = 10.0

    def run(self, ctx: Ctx) -> None:
        ctx.harness.wait_relay_exit(self.timeout)


@dataclass
class AwaitRelayEvent(Action):
    """Wait for a relay log event (instead of sleeping)."""

    event: str
    timeout: float = 10.0

    def run(self, ctx: Ctx) -> None:
        relay = ctx.harness.require_relay()
        relay.proc.wait_for_stderr(rf" relay {self.event}\b", self.timeout)


@dataclass
class AwaitUpstreamEnd(Action):
    """Wait until the newest upstream call has ended (the fake closed or lost it)."""

    timeout: float = 10.0

    def run(self, ctx: Ctx) -> None:
        assert ctx.harness.fake is not None
        ctx.harness.fake.wait_for_end(self.timeout)


# --- clock and disk faults --------------------------------------------------------------------


@dataclass
class JumpWall(Action):
    """Step the relay's wall clock (seconds; None draws a seeded Jepsen-style jump)."""

    seconds: float | None = None

    def run(self, ctx: Ctx) -> None:
        if ctx.clock is None:
            raise ExpectationFailed("JumpWall needs Scenario(clock='wall')")
        jump = self.seconds if self.seconds is not None else ctx.seed.clock_jump("wall")
        ctx.clock.jump_wall(jump)


@dataclass
class AdvanceMonotonic(Action):
    seconds: float

    def run(self, ctx: Ctx) -> None:
        if ctx.clock is None:
            raise ExpectationFailed("AdvanceMonotonic needs Scenario(clock='both')")
        ctx.clock.advance_monotonic(self.seconds)


@dataclass
class FillDisk(Action):
    leave_bytes: int = 0

    def run(self, ctx: Ctx) -> None:
        if ctx.tmpfs is None:
            raise ExpectationFailed("FillDisk needs Scenario(tmpfs_bytes=...)")
        ctx.tmpfs.fill(self.leave_bytes)


@dataclass
class FreeDisk(Action):
    def run(self, ctx: Ctx) -> None:
        if ctx.tmpfs is not None:
            ctx.tmpfs.release()


@dataclass
class FailWrites(Action):
    """EIO on write/pwrite/fsync in the running relay (always, or at a probability)."""

    probability: float | None = None
    heal: bool = False

    def run(self, ctx: Ctx) -> None:
        if ctx.fiu_prefix is None:
            raise ExpectationFailed("FailWrites needs Scenario(fiu=True)")
        relay = ctx.harness.require_relay()
        commands = eio_on_writes(self.probability)
        if self.heal:
            commands = tuple("disable " + c.split(" ", 1)[1].split(",")[0] for c in commands)
        for command in commands:
            fiu_ctrl(relay.proc.pid, command, ctx.fiu_prefix, ctx.harness.history)


@dataclass
class WaitFor(Action):
    """Wait for a condition on the context (bounded polling, never a bare sleep)."""

    what: str
    probe: Any  # Callable[[Ctx], bool]
    timeout: float = 10.0

    def run(self, ctx: Ctx) -> None:
        wait_until(lambda: self.probe(ctx), timeout=self.timeout, what=self.what)


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
            "client_request", turn=name, conversation="raw", stream=False,
            body={"raw_bytes": len(self.body), "head": self.body[:80].decode("latin-1")},
        )  # fmt: skip
        conn = RelayConnection(relay.base_url, ctx.harness.relay_token)
        pieces = [self.body[i : i + self.piece_bytes]
                  for i in range(0, len(self.body), self.piece_bytes)]  # fmt: skip
        conn.send_request("POST", self.path, pieces, headers=self.headers, chunked=self.chunked,
                          content_length=None if self.chunked else len(self.body))  # fmt: skip
        conn.read_head()
        finish_turn(ctx, turn, conn.read_all())
