"""Expectations: what must have happened (``scenario << Expectation(...)``).

Three vantage points, as the issue asks: what the client got (:class:`ClientGot`), what
the upstream received and how its call ended (:class:`UpstreamReceived`,
:class:`UpstreamEnded`), and what the relay reported (:class:`RelayReported`,
:class:`RelayAlive`, :class:`RelayExited`). Values may be literals, matchers
(``Contains``, ``Matches``, ``AtLeast``) or placeholders.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scenarios.core import Ctx, Expectation, ExpectationFailed, matches
from scenarios.faults.disk import inspect_store
from scenarios.relaylog import parse_relay_events


def _compare(what: str, expected: Mapping[Any, Any], actual: Mapping[Any, Any]) -> None:
    wrong = [
        f"{key}: expected {value!r}, got {actual.get(key)!r}"
        for key, value in expected.items()
        if value is not None and not matches(value, actual.get(key))
    ]
    if wrong:
        raise ExpectationFailed(f"{what}: " + "; ".join(wrong))


@dataclass
class ClientGot(Expectation):
    turn: str | None = None
    outcome: Any = None  # success | error | cut | disconnected
    status: Any = None
    text: Any = None
    finish_reason: Any = None
    error_code: Any = None
    error_message: Any = None
    done: Any = None
    frames: Any = None
    tool_call_id: Any = None
    completion_id: Any = None

    def check(self, ctx: Ctx) -> None:
        turn = ctx.turn(self.turn)
        answer = turn.answer
        if answer is None:
            raise ExpectationFailed(f"turn {turn.name} has no answer yet (still held open?)")
        error = answer.error or {}
        actual = {
            "outcome": answer.outcome,
            "status": answer.status,
            "text": answer.text,
            "finish_reason": answer.finish_reason,
            "error_code": error.get("code"),
            "error_message": error.get("message"),
            "done": answer.done,
            "frames": len(answer.frames),
            "tool_call_id": answer.tool_calls[0]["id"] if answer.tool_calls else None,
            "completion_id": answer.completion_id,
        }
        expected = {k: v for k, v in vars(self).items() if k != "turn"}
        _compare(f"client answer of {turn.name}", expected, actual)


@dataclass(frozen=True)
class ReplayOf:
    """A reasoning item minted in the answer to ``turn``, expected at input index ``at``
    (with the ciphertext of that answer's final, authoritative output)."""

    turn: str
    at: int


class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()  # ``UpstreamReceived(reasoning={1: ABSENT})``: the key is not there


@dataclass
class UpstreamReceived(Expectation):
    """The upstream call(s) a turn caused: how many, and exactly which replayed items where.

    ``replayed=[]`` means no reasoning item with ``encrypted_content`` at all;
    ``replayed=[ReplayOf("t1", at=2)]`` means exactly one, at input index 2, minted for t1.
    For a Chat provider's call, ``continuity`` is the fake's Chat probe (``restored``,
    ``exact``, ``wrong``, ``missing``) and ``reasoning={index: value}`` says what
    ``reasoning_content`` the message at that index of ``messages`` carried (a value,
    matcher or :data:`ABSENT`).
    """

    turn: str | None = None
    calls: Any = 1
    replayed: list[ReplayOf] | None = None
    continuity: dict[str, Any] = field(default_factory=dict)
    reasoning: dict[int, Any] = field(default_factory=dict)

    def check(self, ctx: Ctx) -> None:
        turn = ctx.turn(self.turn)
        calls = ctx.upstream_of(turn)
        if not matches(self.calls, len(calls)):
            raise ExpectationFailed(
                f"turn {turn.name}: expected {self.calls!r} upstream calls, saw {len(calls)}"
            )
        if not calls:
            return
        call = calls[-1]
        _compare(f"continuity of {turn.name}'s upstream call", self.continuity, call["continuity"])
        if self.reasoning:
            messages = (call["body"] or {}).get("messages") or []
            sent = {
                index: m.get("reasoning_content", ABSENT) if isinstance(m, dict) else ABSENT
                for index, m in enumerate(messages)
            }
            _compare(f"reasoning_content {turn.name} sent upstream", self.reasoning, sent)
        if self.replayed is None:
            return
        items = (call["body"] or {}).get("input") or []
        found = [
            (index, item.get("encrypted_content"))
            for index, item in enumerate(items)
            if isinstance(item, dict)
            and item.get("type") == "reasoning"
            and isinstance(item.get("encrypted_content"), str)
        ]
        wanted = []
        for replay in self.replayed:
            source = ctx.upstream_of(ctx.turn(replay.turn))
            tokens = {t for c in source for t in _minted_tokens(c)}
            wanted.append((replay.at, tokens))
        if len(found) != len(wanted) or any(
            at != index or token not in tokens
            for (index, token), (at, tokens) in zip(found, wanted, strict=False)
        ):
            raise ExpectationFailed(
                f"turn {turn.name}: expected replayed items at {[w[0] for w in wanted]} "
                f"(minted in {[r.turn for r in self.replayed]}), found at {[f[0] for f in found]}"
            )


def _minted_tokens(call: dict[str, Any]) -> list[str]:
    """The tokens a replay of ``call``'s answer may carry: those of its final output (the
    terminal event's, authoritative when ``output_item.done`` carried other bytes), or,
    for a call that never finished its output, those its done events showed."""
    tokens = [
        item["encrypted_content"]
        for item in call["output"]
        if item.get("type") == "reasoning" and isinstance(item.get("encrypted_content"), str)
    ]
    if tokens:
        return tokens
    for event in call["events"]:
        item = event["data"].get("item") if isinstance(event["data"], dict) else None
        if isinstance(item, dict) and isinstance(item.get("encrypted_content"), str):
            tokens.append(item["encrypted_content"])
    return tokens


@dataclass
class UpstreamEnded(Expectation):
    """How the fake's call for a turn ended: finish, close, reset, client_gone, stopped."""

    turn: str | None = None
    ended: Any = None
    events_sent: Any = None
    outcome: Any = None

    def check(self, ctx: Ctx) -> None:
        turn = ctx.turn(self.turn)
        calls = ctx.upstream_of(turn)
        if not calls:
            raise ExpectationFailed(f"turn {turn.name} made no upstream call")
        call = calls[-1]
        actual = {
            "ended": call["ended"],
            "events_sent": len(call["events"]),
            "outcome": call["outcome"],
        }
        expected = {"ended": self.ended, "events_sent": self.events_sent, "outcome": self.outcome}
        _compare(f"upstream call of {turn.name}", expected, actual)


@dataclass
class RelayReported(Expectation):
    """A relay log event (in any incarnation so far) with these fields."""

    event: str
    count: Any = None  # default: at least one
    fields: dict[str, Any] = field(default_factory=dict)

    def check(self, ctx: Ctx) -> None:
        seen = []
        for proc in ctx.harness.relay_processes():
            for name, values in parse_relay_events(proc.stderr_text()):
                if name == self.event and all(
                    matches(v, values.get(k)) for k, v in self.fields.items()
                ):
                    seen.append(values)
        if self.count is None:
            if seen:
                return
            raise ExpectationFailed(f"the relay never reported {self.event} {self.fields}")
        if not matches(self.count, len(seen)):
            raise ExpectationFailed(
                f"the relay reported {self.event} {self.fields} {len(seen)} times, "
                f"expected {self.count!r}"
            )


@dataclass
class RelayAlive(Expectation):
    def check(self, ctx: Ctx) -> None:
        if not ctx.harness.poll_relay():
            relay = ctx.harness.require_relay()
            raise ExpectationFailed(
                f"the relay died (exit {relay.proc.returncode}):\n{relay.proc.stderr_tail()}"
            )


@dataclass
class StoreIntegrity(Expectation):
    """The relay's cache file, opened read-only while no relay owns it (a running relay
    holds an exclusive lock): ``PRAGMA integrity_check`` says ok, and ``intents`` (a value
    or matcher) counts the unresolved dispatch intents it holds (what recovery will find).
    """

    intents: Any = None

    def check(self, ctx: Ctx) -> None:
        if ctx.harness.poll_relay():
            raise ExpectationFailed("StoreIntegrity needs the relay down (it owns the file)")
        path = ctx.harness.cache_path
        report = inspect_store(path)
        ctx.harness.history.record(
            "note", note="store_integrity", integrity=report.integrity, rows=report.rows
        )
        if report.integrity != "ok":
            raise ExpectationFailed(f"integrity_check of {path}: {report.integrity}")
        _compare(f"the store {path.name}", {"intents": self.intents}, report.rows)


@dataclass
class Holds(Expectation):
    """A custom condition over the run context."""

    what: str
    predicate: Callable[[Ctx], bool]

    def check(self, ctx: Ctx) -> None:
        if not self.predicate(ctx):
            raise ExpectationFailed(f"expected: {self.what}")

    def describe(self) -> str:
        return f"Holds({self.what!r})"
