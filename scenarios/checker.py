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
- ``nothing_lost``: a block the client received in full from a cache-enabled relay, at a
  position no other generation contested, is replayed by the next request that extends
  exactly that history in the same scope, provided every relay in between had the cache
  enabled and no fault announced an allowed loss. (Vacuous while the cache is disabled.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scenarios.history import Event, History
from scenarios.visible import (
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
        items = input_items(body)
        tokens, ids = _minted(event)
        found.append(
            Generation(
                seq=event.seq,
                index=int(event.get("index", -1)),
                scope=scope_of(body),
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
                if g.index not in used
                and g.segment == shown
                and answer.get("finish_reason") in SUCCESS_FINISH[g.outcome]
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


def nothing_lost(history: History, gens: list[Generation] | None = None) -> list[Violation]:
    gens = generations(history) if gens is None else gens
    position_count: dict[tuple[str, tuple[Any, ...]], int] = {}
    for gen in gens:
        key = (gen.scope, gen.prefix)
        position_count[key] = position_count.get(key, 0) + 1
    delivered = _delivered_blocks(history, gens)
    violations = []
    for block in delivered:
        if position_count[(block.scope, block.prefix)] != 1 or not block.tokens:
            continue  # contested or reasoning-free positions may legitimately not replay
        extended = (*block.prefix, block.segment)
        for later in gens:
            if later.seq <= block.seq or later.scope != block.scope:
                continue
            if later.prefix[: len(extended)] != extended:
                continue
            if not _cache_continuous(history, block.seq, later.seq):
                break
            if not any(
                isinstance(item, dict) and item.get("encrypted_content") in block.tokens
                for item in later.input
            ):
                violations.append(
                    Violation(
                        "nothing_lost",
                        f"block of upstream call {block.index} was "
                        f"delivered in full but call {later.index} did not replay it",
                        later.seq,
                    )
                )
            break  # only the first extending request is owed the replay
    return violations


def _delivered_blocks(history: History, gens: list[Generation]) -> list[Generation]:
    """Completed generations whose whole answer reached the client ([DONE] or JSON)."""
    shown = {
        _answer_segment(a)
        for a in history.of("client_answer")
        if a.get("outcome") == "success" and a.get("finish_reason") in ("stop", "tool_calls")
    }
    return [g for g in gens if g.outcome == "completed" and g.segment in shown]


def _cache_continuous(history: History, start: int, end: int) -> bool:
    """Every relay incarnation alive between two events had the cache on; no loss allowed."""
    enabled = False
    for event in history.events:
        if event.kind == "process_start" and event.get("role") == "relay":
            enabled = bool(event.get("cache_enabled"))
            if start < event.seq < end and not enabled:
                return False
        if event.seq == start and not enabled:
            return False
        if start < event.seq < end and event.kind == "fault" and event.get("allows_loss"):
            return False
    return enabled


# --- entry point --------------------------------------------------------------------------

Check = Callable[[History, list[Generation] | None], list[Violation]]
CHECKS: dict[str, Check] = {
    "no_wrong_replay": no_wrong_replay,
    "no_false_success": no_false_success,
    "no_crash_on_bad_input": no_crash_on_bad_input,
    "no_internal_error": no_internal_error,
    "nothing_lost": nothing_lost,
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
    report.stats = {
        "client_answers": len(history.of("client_answer")),
        "upstream_calls": len(history.of("upstream_exchange")),
        "replayed_items": sum(
            1 for g in gens for i in g.input if isinstance(i, dict) and i.get("type") == "reasoning"
        ),
        "wrong_replays": report.count("no_wrong_replay"),
        "relay_starts": sum(1 for e in history.of("process_start") if e.get("role") == "relay"),
        "faults": len(history.of("fault")),
    }
    return report
