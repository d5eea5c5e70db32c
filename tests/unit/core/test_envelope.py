"""relay.core.envelope: the normalized form of a message, which the identity hashes.

An assistant message's equivalent forms become one (text parts joined, no content as "",
tool_calls null or absent as [], an index equal to its position dropped); everything else
is hashed as sent. The null fields that carry nothing are pinned in test_history_digest.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from relay.core.envelope import normalize_assistant, normalize_message


def test_normalized_envelope_has_text_content_and_tool_calls() -> None:
    assert normalize_assistant({"role": "assistant"}) == {
        "role": "assistant",
        "content": "",
        "tool_calls": [],
    }


def test_normalization_leaves_its_input_untouched() -> None:
    call = {"id": "c", "index": 0, "type": "function", "function": {"name": "f"}}
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": "a"}],
        "tool_calls": [call],
    }
    before = json.dumps(message)
    normalized = normalize_assistant(message)
    assert json.dumps(message) == before
    assert normalized["tool_calls"] == [{"id": "c", "type": "function", "function": {"name": "f"}}]


@pytest.mark.parametrize(
    "message",
    [
        {"role": "user", "content": [{"type": "text", "text": "a"}]},
        {"role": "tool", "tool_call_id": "c", "name": "n", "content": "x"},
        {"role": "system", "content": None},
        ["not", "a", "message"],
        "text",
    ],
)
def test_only_assistant_messages_are_normalized(message: Any) -> None:
    assert normalize_message(message) is message


@pytest.mark.parametrize(
    "content",
    [
        [{"type": "text", "text": "a", "annotations": []}],  # not an *exact* text part
        [{"type": "refusal", "refusal": "no"}],
        [{"type": "text", "text": 1}],
        ["a"],
        {"text": "a"},
        7,
    ],
)
def test_content_outside_the_list_is_hashed_as_sent(content: Any) -> None:
    assert normalize_assistant({"role": "assistant", "content": content})["content"] == content


def test_tool_calls_null_is_empty_and_not_a_list_stays() -> None:
    assert normalize_assistant({"role": "assistant", "tool_calls": None})["tool_calls"] == []
    assert normalize_assistant({"role": "assistant", "tool_calls": {}})["tool_calls"] == {}


@pytest.mark.parametrize(
    ("index", "position", "dropped"),
    [
        (0, 0, True),
        (1, 1, True),
        (1, 0, False),
        (True, 1, False),
        (0.0, 0, False),
        (None, 0, False),
    ],
)
def test_only_an_integer_index_equal_to_its_position_is_dropped(
    index: Any, position: int, dropped: bool
) -> None:
    calls: list[Any] = [{"id": "x"}] * position + [{"id": "c", "index": index}]
    out = normalize_assistant({"role": "assistant", "tool_calls": calls})["tool_calls"][position]
    assert ("index" not in out) is dropped


def test_reasoning_content_is_kept_unless_excluded() -> None:
    message = {"role": "assistant", "content": "a", "reasoning_content": "thought"}
    assert normalize_message(message)["reasoning_content"] == "thought"
    assert "reasoning_content" not in normalize_message(message, exclude_reasoning_content=True)
    user = {"role": "user", "content": "a", "reasoning_content": "x"}
    assert normalize_message(user, exclude_reasoning_content=True) is user
