"""Checks over a recorded history, shared by every scenario (Jepsen-style: the run
records, the checker judges afterwards against a small model).

- ``no_wrong_replay``: every reasoning item the relay sent upstream was minted by the fake
  for exactly the visible assistant message it now precedes, after exactly the visible
  history it was generated from, in the same scope (model, tools, reasoning settings,
  caller …). The number of wrong replays must be 0.
- ``no_false_success``: every answer the client took as a success is backed by an
  upstream generation that completed (or was honestly incomplete, with ``length`` /
  ``content_filter``), and shows the client exactly what that generation produced.
- ``no_crash_on_bad_input``: no relay process died unless the harness killed it or an
  armed crash point did.
- ``no_internal_error``: the relay never answered "internal relay error".
- ``nothing_lost``: the relay's committed state survives, restarts included. A block is
  *committed* once the client received it in full (``[DONE]`` or a JSON answer, finish
  ``stop``/``tool_calls``) from a cache-enabled relay that then confirmed the delivery
  (its ``chat_done`` log line follows the intent's resolution) or was stopped gracefully.
  An answer the client had in full when its relay was killed, before that confirmation,
  is not committed: its intent was unresolved, and startup recovery poisons that
  position (design §4, §7). It is *owed* to the first later
  request that extends exactly its history in the same scope (credential included), and
  that request must replay it, provided every relay in between had the cache enabled, no
  fault announced an allowed loss, and nothing explains the loss: a *contest* of its
  position or of an ancestor's (a block it was generated on top of), i.e. another
  generation at the same scope and history that the client did not receive in full (cut,
  failed, incomplete: the relay poisons the position), that showed the same visible answer
  (a conflict), or that was a refusal (unpredictable, so poisoned). A regeneration with
  other visible text contests nothing: each version is owed on its own branch. A chat
  request the relay took but never answered (no response head: it died first) contests
  its position too, with or without an upstream call: its intent may exist, and recovery
  poisons it. A direct ``POST /v1/responses`` request (``endpoint="responses"``) *fences*:
  nothing is owed across it to blocks of that model (and of its ``user``, when it names
  one) whose request started before it, and a generation in flight during it contests its
  position (design §7). The report's
  ``owed_replays`` / ``owed_across_restarts`` stats show how often the check bound.
- ``no_wrong_restore``: for strict Chat providers (calls to the fake's
  ``/v1/chat/completions``), every ``reasoning_content`` the relay put into a message the
  client sent without it is exactly what the fake minted, in an earlier call of the same
  provider and model, for a visible assistant message equal to this one (content, refusal,
  tool-call ids, names and arguments as JSON), and the fake's own probe did not find it
  ``wrong``. ``""`` (a rule's fill on a miss) is not reasoning and never counts as wrong;
  values the client sent itself are its own. The stats count ``chat_calls``,
  ``restored_reasoning``, ``empty_fills`` and ``wrong_restores`` (must be 0).

Chat-provider calls join the model as generations without Responses input or tokens, so
``no_wrong_replay`` and ``nothing_lost`` have nothing to judge there, while ``no_false_success``
backs a client's success with the provider's completed answer exactly as for Responses.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scenarios.history import Event, History
from scenarios.visible import (
    canonical,
    chat_segments,
    input_items,
    output_segment,
    scope_of,
    segment_index_of_item,
    segments,
)


@dataclass(frozen=True)
class Violation:
    check: str
    detail: str
    seq: int | None = None

    def __str__(self) -> str:
        where = f" (event {self.seq})" if self.seq is not None else ""
        return f"{self.check}{where}: {self.detail}"


@dataclass
class CheckReport:
    violations: list[Violation] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations

    def count(self, check: str) -> int:
        return sum(1 for violation in self.violations if violation.check == check)

    def describe(self) -> str:
        if self.ok:
            return "history checks passed " + str(self.stats)
        return "history checks failed:\n" + "\n".join(f"  - {v}" for v in self.violations)


@dataclass(frozen=True)
class Generation:
    """One upstream call, seen through the model."""

    seq: int
    index: int
    scope: str
    prefix: tuple[Any, ...]  # visible segments of its input
    segment: Any  # the visible assistant segment of its output (None if unusable)
    tokens: frozenset[str]  # every encrypted_content it sent
    reasoning_ids: frozenset[str]
    outcome: str
    input: list[Any]
    body: Any


def generations(history: History) -> list[Generation]:
    """The model's view of every upstream call (check_history computes it once)."""
    found = []
    for event in history.of("upstream_exchange"):
        body = event.get("body")
        if is_chat_call(event):
            found.append(_chat_generation(event, body))
            continue
        items = input_items(body)
        tokens, ids = _minted(event)
        found.append(
            Generation(
                seq=event.seq,
                index=int(event.get("index", -1)),
                scope=_scope(event, body),
                prefix=tuple(segments(items)),
                segment=output_segment(event.get("output") or []),
                tokens=frozenset(tokens),
                reasoning_ids=frozenset(ids),
                outcome=str(event.get("outcome")),
                input=items,
                body=body,
            )
        )
    return found


CHAT_PATH = "/v1/chat/completions"


def is_chat_call(event: Event) -> bool:
    """A call to a strict Chat provider (the fake's ``/v1/chat/completions``)."""
    return bool(event.get("path") == CHAT_PATH)


def _chat_generation(event: Event, body: Any) -> Generation:
    """A Chat-provider call: visible prefix from ``messages``, the assistant message it
    answered, no Responses input and no ciphertext (nothing to replay-check)."""
    messages = body.get("messages") if isinstance(body, dict) else None
    output = event.get("output") or []
    return Generation(
        seq=event.seq,
        index=int(event.get("index", -1)),
        scope=_chat_scope(event, body),
        prefix=tuple(chat_segments(messages if isinstance(messages, list) else [])),
        segment=chat_segment(output[0]) if output else None,
        tokens=frozenset(),
        reasoning_ids=frozenset(),
        outcome=str(event.get("outcome")),
        input=[],
        body=body,
    )


def _chat_scope(event: Event, body: Any) -> str:
    model = body.get("model") if isinstance(body, dict) else None
    return f"chat|{canonical(model)}|credential={event.get('credential')}"


def chat_segment(message: Any, *, json_arguments: bool = False) -> tuple[Any, ...]:
    """What a client sees of a Chat assistant message (``json_arguments``: tool arguments
    compared as JSON, keys sorted, as the fake's seal binds them)."""
    message = message if isinstance(message, dict) else {}
    listed = message.get("tool_calls")
    calls = []
    for raw in listed if isinstance(listed, list) else []:
        call: dict[str, Any] = raw if isinstance(raw, dict) else {}
        nested = call.get("function")
        function: dict[str, Any] = nested if isinstance(nested, dict) else call
        arguments = function.get("arguments")
        if json_arguments and isinstance(arguments, str):
            with contextlib.suppress(ValueError, RecursionError):
                arguments = canonical(json.loads(arguments))
        calls.append((call.get("id"), function.get("name"), arguments))
    text = message.get("content")
    if isinstance(text, list):
        text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
    return ("assistant", text or "", message.get("refusal") or "", tuple(calls))


def _scope(event: Event, body: Any) -> str:
    """The request's scope, plus the upstream credential the calling relay used (the
    fake redacts keys; the harness labels each call with its relay's credential)."""
    return f"{scope_of(body)}|credential={event.get('credential')}"


def _minted(event: Event) -> tuple[set[str], set[str]]:
    tokens: set[str] = set()
    ids: set[str] = set()
    items = list(event.get("output") or [])
    for sent in event.get("events") or []:
        data = sent.get("data") if isinstance(sent, dict) else None
        if isinstance(data, dict) and isinstance(data.get("item"), dict):
            items.append(data["item"])
    for item in items:
        if isinstance(item, dict) and item.get("type") == "reasoning":
            if isinstance(item.get("encrypted_content"), str):
                tokens.add(item["encrypted_content"])
            if isinstance(item.get("id"), str):
                ids.add(item["id"])
    return tokens, ids


# --- no wrong replay ----------------------------------------------------------------------


def no_wrong_replay(history: History, gens: list[Generation] | None = None) -> list[Violation]:
    gens = generations(history) if gens is None else gens
    by_token = {token: gen for gen in gens for token in gen.tokens}
    by_id = {rid: gen for gen in gens for rid in gen.reasoning_ids}
    violations = []
    for gen in gens:
        visible = list(gen.prefix)
        seen: set[object] = set()
        for index, item in enumerate(gen.input):
            if not (isinstance(item, dict) and item.get("type") == "reasoning"):
                continue
            token = item.get("encrypted_content")
            key = token if isinstance(token, str) else str(item.get("id"))
            source = by_token.get(key) if isinstance(token, str) else by_id.get(key)
            # Each block replaces its assistant message exactly once.
            problem = "replays the same reasoning item twice" if key in seen else ""
            seen.add(key)
            problem = problem or _replay_problem(gen, visible, index, source)
            if problem:
                violations.append(
                    Violation(
                        "no_wrong_replay",
                        f"upstream call {gen.index} item {index}: {problem}",
                        gen.seq,
                    )
                )
    return violations


def _replay_problem(gen: Generation, visible: list[Any], index: int, source: Any) -> str:
    if source is None:
        return "replays a reasoning item the fake never minted"
    if source.seq >= gen.seq and source is not gen:
        return "replays a reasoning item minted later (impossible history)"
    if source is gen:
        return "replays a reasoning item minted by this very call"
    if source.segment is None:
        return f"replays reasoning from call {source.index}, which showed no single answer"
    position = segment_index_of_item(gen.input, index)
    if position < 0 or position >= len(visible) or visible[position] != source.segment:
        return (
            f"reasoning minted in call {source.index} placed before a different visible "
            "assistant message"
        )
    if tuple(visible[:position]) != source.prefix:
        return (
            f"reasoning minted in call {source.index} replayed after a different visible "
            "history (edited or reordered earlier messages)"
        )
    if gen.scope != source.scope:
        return f"reasoning minted in call {source.index} replayed in another scope"
    return ""


# --- no false success ---------------------------------------------------------------------

SUCCESS_FINISH = {"completed": ("stop", "tool_calls"), "incomplete": ("length", "content_filter")}


def no_false_success(history: History, gens: list[Generation] | None = None) -> list[Violation]:
    gens = generations(history) if gens is None else gens
    backing = [gen for gen in gens if gen.outcome in SUCCESS_FINISH]
    used: set[int] = set()
    violations = []
    for answer in history.of("client_answer"):
        if answer.get("done") and answer.get("error"):
            violations.append(
                Violation(
                    "no_false_success",
                    f"turn {answer['turn']}: an error frame and [DONE] in one stream",
                    answer.seq,
                )
            )
        if answer.get("frames_after_done"):
            violations.append(
                Violation(
                    "no_false_success", f"turn {answer['turn']}: frames after [DONE]", answer.seq
                )
            )
        if answer.get("outcome") != "success":
            continue
        shown = _answer_segment(answer)
        match = next(
            (
                g
                for g in backing
                if g.index not in used and g.segment == shown and _finish_matches(answer, g)
            ),
            None,
        )
        if match is None:
            violations.append(
                Violation(
                    "no_false_success",
                    f"turn {answer['turn']} looked successful (finish_reason="
                    f"{answer.get('finish_reason')!r}, text={str(answer.get('text'))[:60]!r}) "
                    "but no completed upstream generation produced that answer",
                    answer.seq,
                )
            )
        else:
            used.add(match.index)
    return violations


def _finish_matches(answer: Event, gen: Generation) -> bool:
    if answer.get("endpoint") == "responses":  # a passthrough success: a completed response
        return gen.outcome == "completed"
    return answer.get("finish_reason") in SUCCESS_FINISH[gen.outcome]


def _answer_segment(answer: Event) -> tuple[Any, ...]:
    calls = tuple(
        (call.get("id"), call.get("name"), call.get("arguments"))
        for call in answer.get("tool_calls") or []
    )
    return ("assistant", answer.get("text") or "", answer.get("refusal") or "", calls)


# --- process deaths and internal errors ---------------------------------------------------


def no_crash_on_bad_input(
    history: History, gens: list[Generation] | None = None
) -> list[Violation]:
    return [
        Violation(
            "no_crash_on_bad_input",
            f"relay incarnation {event.get('incarnation')} died on its own (exit "
            f"{event.get('returncode')}); stderr tail:\n{event.get('stderr_tail', '')}",
            event.seq,
        )
        for event in history.of("process_exit")
        if event.get("role") == "relay" and event.get("cause") == "unexpected"
    ]


def no_internal_error(history: History, gens: list[Generation] | None = None) -> list[Violation]:
    violations = []
    for answer in history.of("client_answer"):
        message = str((answer.get("error") or {}).get("message", ""))
        if message.startswith("internal relay error"):
            violations.append(
                Violation("no_internal_error", f"turn {answer['turn']}: {message}", answer.seq)
            )
    return violations


# --- nothing lost -------------------------------------------------------------------------


@dataclass(frozen=True)
class Owed:
    """``block`` must be replayed by ``later``; ``restarts`` relay starts lie between."""

    block: Generation
    later: Generation
    restarts: int


def owed_replays(history: History, gens: list[Generation] | None = None) -> list[Owed]:
    """Every (committed block, first later request owed its replay) pair of the run."""
    gens = generations(history) if gens is None else gens
    delivered = _delivered_blocks(history, gens, _unconfirmed_deliveries(history))
    shown = {gen.index for gen in delivered}
    at_position: dict[tuple[str, tuple[Any, ...]], list[Generation]] = {}
    for gen in gens:
        at_position.setdefault((gen.scope, gen.prefix), []).append(gen)
    by_token = {token: gen for gen in gens for token in gen.tokens}
    fences = _fences(history)
    requests = _chat_requests(history)
    doubted = _doubted_positions(history) | _fenced_in_flight(gens, fences, requests)

    def contested(gen: Generation) -> bool:
        return gen.prefix in doubted or any(
            other is not gen
            and (
                other.index not in shown
                or other.segment == gen.segment
                or bool(other.segment and other.segment[2])  # a refusal
            )
            for other in at_position[(gen.scope, gen.prefix)]
        )

    owed = []
    for block in delivered:
        ancestors = [
            by_token[item["encrypted_content"]]
            for item in block.input
            if isinstance(item, dict) and item.get("encrypted_content") in by_token
        ]
        if not block.tokens or any(contested(gen) for gen in (block, *ancestors)):
            continue  # reasoning-free or contested chains may legitimately not replay
        extended = (*block.prefix, block.segment)
        for later in gens:
            if later.seq <= block.seq or later.scope != block.scope:
                continue
            if later.prefix[: len(extended)] != extended:
                continue
            restarts = _restarts_with_cache(history, block.seq, later.seq)
            if restarts is not None and not _fenced(block, later, fences, requests):
                owed.append(Owed(block, later, restarts))
            break  # only the first extending request is owed the replay
    return owed


def nothing_lost(history: History, gens: list[Generation] | None = None) -> list[Violation]:
    violations = []
    for owed in owed_replays(history, gens):
        block, later = owed.block, owed.later
        if not any(
            isinstance(item, dict) and item.get("encrypted_content") in block.tokens
            for item in later.input
        ):
            across = f" across {owed.restarts} relay restart(s)" if owed.restarts else ""
            violations.append(
                Violation(
                    "nothing_lost",
                    f"block of upstream call {block.index} was delivered in full but call "
                    f"{later.index} did not replay it{across}",
                    later.seq,
                )
            )
    return violations


def _delivered_blocks(
    history: History, gens: list[Generation], unconfirmed: frozenset[str] = frozenset()
) -> list[Generation]:
    """Completed generations whose whole answer reached the client ([DONE] or JSON), the
    relay's delivery of it not ``unconfirmed``."""
    shown = {
        _answer_segment(a)
        for a in history.of("client_answer")
        if a.get("outcome") == "success"
        and a.get("endpoint") != "responses"
        and a.get("finish_reason") in ("stop", "tool_calls")
        and a.get("request_id") not in unconfirmed
    }
    return [g for g in gens if g.outcome == "completed" and g.segment in shown]


def _unconfirmed_deliveries(history: History) -> frozenset[str]:
    """Request ids a relay incarnation took (``chat_request``) but never confirmed as
    delivered (``chat_done``), in incarnations that died without a graceful stop: those
    requests' intents may have outlived the process (relay logs reach the history when
    an incarnation's exit is recorded, so only dead incarnations count, which is exactly
    the set startup recovery acts on)."""
    died = {
        e.get("incarnation")
        for e in history.of("process_exit")
        if e.get("role") == "relay" and e.get("cause") != "harness_stop"
    }
    taken: dict[str, Any] = {}
    done: set[str] = set()
    for event in history.of("relay_event"):
        request_id = str((event.get("fields") or {}).get("request_id"))
        if event.get("event") == "chat_request":
            taken[request_id] = event.get("incarnation")
        elif event.get("event") == "chat_done":
            done.add(request_id)
    return frozenset(r for r, incarnation in taken.items() if incarnation in died) - done


def _chat_requests(history: History) -> list[tuple[int, tuple[Any, ...]]]:
    """(seq, visible prefix) of every chat request the client sent, in order."""
    found = []
    for event in history.of("client_request"):
        messages = (event.get("body") or {}).get("messages")
        if event.get("endpoint") != "responses" and isinstance(messages, list):
            found.append((event.seq, tuple(chat_segments(messages))))
    return found


def _doubted_positions(history: History) -> set[tuple[Any, ...]]:
    """Visible positions of chat requests answered with no response head at all: the
    relay died (or was killed) before it answered, maybe after recording the dispatch
    intent, maybe after forwarding. Nobody can tell which, so recovery poisons them."""
    pending: dict[str, tuple[Any, ...]] = {}
    doubted: set[tuple[Any, ...]] = set()
    requests = dict(_chat_requests(history))
    for event in history.events:
        if event.kind == "client_request" and event.seq in requests:
            pending[str(event.get("turn"))] = requests[event.seq]
        elif event.kind == "client_answer" and event.get("status") is None:
            prefix = pending.get(str(event.get("turn")))
            if prefix is not None:
                doubted.add(prefix)
    return doubted


@dataclass(frozen=True)
class Fence:
    """A direct Responses request: the relay retires the scopes it may extend."""

    seq: int
    model: Any
    user: Any  # None: every caller's scopes


def _fences(history: History) -> list[Fence]:
    fences = []
    for event in history.of("client_request"):
        body = event.get("body") or {}
        if event.get("endpoint") == "responses":
            fences.append(Fence(event.seq, body.get("model"), body.get("user")))
    return fences


def _started(gen: Generation, requests: list[tuple[int, tuple[Any, ...]]]) -> int:
    """When the chat request that caused ``gen`` was sent (its call is recorded only once
    it ended): the newest request for the same visible position before it."""
    earlier = (seq for seq, prefix in requests if seq < gen.seq and prefix == gen.prefix)
    return max(earlier, default=gen.seq)


def _fence_hits(fence: Fence, gen: Generation) -> bool:
    body = gen.body if isinstance(gen.body, dict) else {}
    return fence.model == body.get("model") and fence.user in (None, body.get("user"))


def _fenced(
    block: Generation,
    later: Generation,
    fences: list[Fence],
    requests: list[tuple[int, tuple[Any, ...]]],
) -> bool:
    """Whether a fence fell between the start of ``block``'s request and ``later``, in
    ``block``'s model and caller: its scope's generation was advanced in between."""
    started = _started(block, requests) if fences else block.seq
    return any(started < f.seq < later.seq and _fence_hits(f, block) for f in fences)


def _fenced_in_flight(
    gens: list[Generation], fences: list[Fence], requests: list[tuple[int, tuple[Any, ...]]]
) -> set[tuple[Any, ...]]:
    """Positions of generations in flight during a fence of their model and caller: their
    intents were unresolved then, and the fence poisons those positions (design §7)."""
    return {
        gen.prefix
        for gen in gens
        for fence in fences
        if _started(gen, requests) < fence.seq < gen.seq and _fence_hits(fence, gen)
    }


def _restarts_with_cache(history: History, start: int, end: int) -> int | None:
    """How many relay starts lie between two events, if every relay incarnation alive
    between them had the cache on and no fault allowed a loss; else None."""
    enabled = False
    restarts = 0
    for event in history.events:
        if event.seq >= end:
            break
        if event.kind == "process_start" and event.get("role") == "relay":
            enabled = bool(event.get("cache_enabled"))
            if start < event.seq:
                restarts += 1
                if not enabled:
                    return None
        if event.seq == start and not enabled:
            return None
        if start < event.seq and event.kind == "fault" and event.get("allows_loss"):
            return None
    return restarts if enabled else None


# --- no wrong restore (strict Chat providers) --------------------------------------------


@dataclass
class RestoreTally:
    restored: int = 0  # reasoning the relay added (not the client's own), non-empty
    empty_fills: int = 0  # "" the relay added on a miss


def no_wrong_restore(
    history: History, gens: list[Generation] | None = None, tally: RestoreTally | None = None
) -> list[Violation]:
    tally = tally if tally is not None else RestoreTally()
    own = _client_reasoning(history)
    minted: list[tuple[int, str, tuple[Any, ...], str]] = []  # (seq, scope, segment, text)
    violations = []
    for event in history.of("upstream_exchange"):
        if not is_chat_call(event):
            continue
        body = event.get("body") if isinstance(event.get("body"), dict) else {}
        scope = _chat_scope(event, body)
        listed = body.get("messages")
        messages: list[Any] = listed if isinstance(listed, list) else []
        states = {
            item.get("index"): item.get("state")
            for item in (event.get("continuity") or {}).get("items") or []
            if isinstance(item, dict)
        }
        for index, message in enumerate(messages):
            if not isinstance(message, dict) or message.get("role") != "assistant":
                continue
            value = message.get("reasoning_content")
            if value is None or (index, canonical(value)) in own:
                continue  # absent, or the client's own
            if value == "":
                tally.empty_fills += 1
                continue
            tally.restored += 1
            problem = _restore_problem(
                value, message, scope=scope, seq=event.seq, minted=minted, state=states.get(index)
            )
            if problem:
                violations.append(
                    Violation(
                        "no_wrong_restore",
                        f"chat call {event.get('index')} message {index}: {problem}",
                        event.seq,
                    )
                )
        for message in event.get("output") or []:
            if isinstance(message, dict) and message.get("reasoning_content"):
                segment = chat_segment(message, json_arguments=True)
                minted.append((event.seq, scope, segment, str(message["reasoning_content"])))
    return violations


def _restore_problem(
    value: Any,
    message: dict[str, Any],
    *,
    scope: str,
    seq: int,
    minted: list[tuple[int, str, tuple[Any, ...], str]],
    state: Any,
) -> str:
    if state == "wrong":
        return "the fake's probe found the restored reasoning_content wrong"
    segment = chat_segment(message, json_arguments=True)
    sources = [m for m in minted if m[3] == value and m[0] < seq]
    if not sources:
        return "restored a reasoning_content the fake never minted (invented)"
    if not any(m[2] == segment for m in sources):
        return "restored reasoning minted for a different visible assistant message"
    if not any(m[2] == segment and m[1] == scope for m in sources):
        return "restored reasoning minted under another provider or model"
    return ""


def _client_reasoning(history: History) -> set[tuple[int, str]]:
    """(message index, value) of every reasoning_content a client itself sent."""
    own = set()
    for event in history.of("client_request"):
        for body in (event.get("body"), event.get("json")):
            messages = body.get("messages") if isinstance(body, dict) else None
            for index, message in enumerate(messages if isinstance(messages, list) else []):
                if isinstance(message, dict) and "reasoning_content" in message:
                    own.add((index, canonical(message["reasoning_content"])))
    return own


# --- entry point --------------------------------------------------------------------------

Check = Callable[[History, list[Generation] | None], list[Violation]]
CHECKS: dict[str, Check] = {
    "no_wrong_replay": no_wrong_replay,
    "no_false_success": no_false_success,
    "no_crash_on_bad_input": no_crash_on_bad_input,
    "no_internal_error": no_internal_error,
    "nothing_lost": nothing_lost,
    "no_wrong_restore": no_wrong_restore,
}


def check_history(history: History, only: tuple[str, ...] = ("all",)) -> CheckReport:
    names = list(CHECKS) if "all" in only else list(only)
    unknown = set(names) - set(CHECKS)
    if unknown:
        raise ValueError(f"unknown checks {sorted(unknown)}; known: {sorted(CHECKS)}")
    gens = generations(history)
    report = CheckReport()
    for name in names:
        report.violations += CHECKS[name](history, gens)
    owed = owed_replays(history, gens)
    tally = RestoreTally()
    wrong_restores = no_wrong_restore(history, gens, tally)
    report.stats = {
        "client_answers": len(history.of("client_answer")),
        "upstream_calls": len(history.of("upstream_exchange")),
        "replayed_items": sum(
            1 for g in gens for i in g.input if isinstance(i, dict) and i.get("type") == "reasoning"
        ),
        "wrong_replays": report.count("no_wrong_replay"),
        "relay_starts": sum(1 for e in history.of("process_start") if e.get("role") == "relay"),
        "faults": len(history.of("fault")),
        "owed_replays": len(owed),
        "owed_across_restarts": sum(1 for o in owed if o.restarts),
        "chat_calls": sum(1 for e in history.of("upstream_exchange") if is_chat_call(e)),
        "restored_reasoning": tally.restored,
        "empty_fills": tally.empty_fills,
        "wrong_restores": len(wrong_restores),
    }
    return report
