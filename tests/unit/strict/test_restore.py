"""relay.strict.restore: which messages get reasoning back, and stripping."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from relay.strict.restore import (
    has_tools,
    lacks_reasoning,
    needs_reasoning,
    restore,
    strip,
    tool_call_ids,
)
from relay.strict.rules import OnMiss, StrictRule, Turns

TOOL_TURNS = StrictRule("t", Turns.TOOL_CALLS, OnMiss.ABSENT)
TOOL_TURNS_EMPTY = StrictRule("t", Turns.TOOL_CALLS, OnMiss.EMPTY)
ALL_TURNS = StrictRule("a", Turns.ALL_WITH_TOOLS, OnMiss.ABSENT)
REJECTS = StrictRule("r", Turns.REJECTS, OnMiss.ABSENT)


def call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}


USER = {"role": "user", "content": "hi"}
PLAIN = {"role": "assistant", "content": "hello"}
TOOL_TURN = {"role": "assistant", "content": None, "tool_calls": [call("c1"), call("c2")]}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "x"}
HISTORY: list[dict[str, Any]] = [
    USER,
    PLAIN,
    {"role": "user", "content": "more"},
    TOOL_TURN,
    RESULT,
]
ENDS = [f"end{i}" for i in range(len(HISTORY))]


class Store:
    """A lookup double that records what it was asked."""

    def __init__(self, by_end: dict[str, str] | None = None, by_call: dict[str, str] | None = None):
        self.by_end = by_end or {}
        self.by_call = by_call or {}
        self.asked: list[tuple[str | None, tuple[str, ...]]] = []

    def __call__(self, end: str | None, ids: tuple[str, ...]) -> str | None:
        self.asked.append((end, ids))
        if end is not None and end in self.by_end:
            return self.by_end[end]
        return next((self.by_call[i] for i in ids if i in self.by_call), None)


def test_tool_turns_restores_only_tool_call_messages() -> None:
    lookup = Store({"end1": "plain thought", "end3": "tool thought"})
    result = restore(HISTORY, TOOL_TURNS, ENDS, lookup, tools_present=True)
    assert lookup.asked == [("end3", ("c1", "c2"))]
    assert result.messages[3] == {**TOOL_TURN, "reasoning_content": "tool thought"}
    assert result.messages[1] is PLAIN
    assert (result.hits, result.misses, result.filled_empty) == (1, 0, 0)
    assert result.changed


def test_all_turns_with_tools_restores_plain_turns_too() -> None:
    lookup = Store({"end1": "plain thought", "end3": "tool thought"})
    result = restore(HISTORY, ALL_TURNS, ENDS, lookup, tools_present=True)
    assert result.messages[1]["reasoning_content"] == "plain thought"
    assert result.messages[3]["reasoning_content"] == "tool thought"
    assert result.hits == 2


def test_all_turns_without_tools_is_tool_turns() -> None:
    lookup = Store({"end1": "plain thought", "end3": "tool thought"})
    result = restore(HISTORY, ALL_TURNS, ENDS, lookup, tools_present=False)
    assert result.messages[1] is PLAIN
    assert result.hits == 1


def test_identity_first_then_tool_call_ids() -> None:
    lookup = Store(by_call={"c2": "by second id"})
    result = restore(HISTORY, TOOL_TURNS, [None] * len(HISTORY), lookup, tools_present=True)
    assert lookup.asked == [(None, ("c1", "c2"))]
    assert result.messages[3]["reasoning_content"] == "by second id"


@pytest.mark.parametrize(
    ("rule", "expected"),
    [(TOOL_TURNS, None), (TOOL_TURNS_EMPTY, "")],
    ids=["absent", "empty"],
)
def test_a_miss_follows_the_rule(rule: StrictRule, expected: str | None) -> None:
    result = restore(HISTORY, rule, ENDS, Store(), tools_present=True)
    assert result.misses == 1
    assert result.messages[3].get("reasoning_content", None) == expected
    assert ("reasoning_content" in result.messages[3]) is (expected is not None)
    assert result.filled_empty == (1 if expected == "" else 0)
    assert result.changed is (expected == "")


def test_a_null_field_becomes_empty_on_a_miss() -> None:
    history = [USER, {**TOOL_TURN, "reasoning_content": None}]
    result = restore(history, TOOL_TURNS_EMPTY, [None, "e"], Store(), tools_present=False)
    assert result.messages[1]["reasoning_content"] == ""


def test_reasoning_the_client_kept_is_left_alone() -> None:
    kept = {**TOOL_TURN, "reasoning_content": "the client's own"}
    lookup = Store({"e": "stored"})
    result = restore([USER, kept], TOOL_TURNS, [None, "e"], lookup, tools_present=True)
    assert result.messages[1] is kept
    assert lookup.asked == []


def test_an_empty_string_counts_as_lacking() -> None:
    emptied = {**TOOL_TURN, "reasoning_content": ""}
    result = restore(
        [USER, emptied], TOOL_TURNS, [None, "e"], Store({"e": "stored"}), tools_present=True
    )
    assert result.messages[1]["reasoning_content"] == "stored"
    # ... and a miss leaves the client's "" as it was.
    missed = restore([USER, emptied], TOOL_TURNS_EMPTY, [None, "e"], Store(), tools_present=True)
    assert missed.messages[1] is emptied
    assert missed.filled_empty == 0


def test_rejecting_rule_restores_nothing() -> None:
    result = restore(HISTORY, REJECTS, ENDS, Store({"end3": "x"}), tools_present=True)
    assert result.messages == HISTORY
    assert not result.changed


def test_inputs_are_never_mutated() -> None:
    before = copy.deepcopy(HISTORY)
    restore(HISTORY, ALL_TURNS, ENDS, Store({"end1": "a", "end3": "b"}), tools_present=True)
    strip([{**m, "reasoning_content": "x"} for m in HISTORY])
    assert before == HISTORY


def test_digest_count_must_match() -> None:
    with pytest.raises(ValueError, match="one end digest"):
        restore(HISTORY, TOOL_TURNS, ENDS[:-1], Store(), tools_present=True)


def test_strip_removes_the_field_everywhere() -> None:
    messages = [
        USER,
        {**PLAIN, "reasoning_content": "a"},
        {**TOOL_TURN, "reasoning_content": None},
        "not a message",
    ]
    out, stripped = strip(messages)
    assert stripped == 2
    assert out == [USER, PLAIN, TOOL_TURN, "not a message"]
    assert out[0] is USER


def test_helpers() -> None:
    assert tool_call_ids(TOOL_TURN) == ("c1", "c2")
    assert tool_call_ids({"role": "assistant", "tool_calls": [{"id": 3}, "x", {"id": ""}]}) == ()
    assert tool_call_ids("nope") == ()
    assert has_tools([{"type": "function"}]) and not has_tools([]) and not has_tools(None)
    assert needs_reasoning(TOOL_TURN, Turns.TOOL_CALLS, tools_present=False)
    assert not needs_reasoning(PLAIN, Turns.TOOL_CALLS, tools_present=True)
    assert needs_reasoning(PLAIN, Turns.ALL_WITH_TOOLS, tools_present=True)
    assert not needs_reasoning(USER, Turns.ALL_WITH_TOOLS, tools_present=True)
    assert not needs_reasoning(
        {**TOOL_TURN, "tool_calls": []}, Turns.TOOL_CALLS, tools_present=True
    )
    assert lacks_reasoning(PLAIN) and lacks_reasoning({"reasoning_content": ""})
    assert not lacks_reasoning({"reasoning_content": "x"})
