"""Chat messages from a Responses-shaped body (relay.core.responses_history).

Cursor sends some models a Responses-shaped body (``input``, ``instructions``); its
visible history is derived as the Chat messages the same conversation would have been,
or not at all (``None``) when the items are not exactly such a conversation.
"""

from __future__ import annotations

from typing import Any

import pytest

from relay.core.responses_history import (
    visible_history_from_responses_input,
    visible_messages_from_responses_input,
)

FUNCTION_CALL = {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "ok"}


def chat_call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "read", "arguments": "{}"}}


def assistant_item(text: str, **extra: Any) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, **extra}
    return {"type": "message", "role": "assistant", "content": [part]}


def test_a_responses_shaped_history_maps_to_chat_envelopes() -> None:
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        assistant_item("reading", annotations=[]),
        FUNCTION_CALL,
        {**FUNCTION_CALL, "call_id": "c2"},
        OUTPUT,
        {**OUTPUT, "call_id": "c2"},
        FUNCTION_CALL,
        OUTPUT,
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "d"}]},
        {"role": "user", "content": "thanks"},
    ]
    tool_call = chat_call("c1")
    assert visible_messages_from_responses_input(items, "be brief") == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": "reading", "tool_calls": [tool_call, chat_call("c2")]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "tool", "tool_call_id": "c2", "content": "ok"},
        {"role": "assistant", "content": "", "tool_calls": [tool_call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "developer", "content": [{"type": "text", "text": "d"}]},
        {"role": "user", "content": "thanks"},
    ]


def test_a_string_input_is_one_user_message() -> None:
    assert visible_messages_from_responses_input("hi", None) == [{"role": "user", "content": "hi"}]


def test_instructions_never_collide_with_an_input_system_message() -> None:
    with_instructions = visible_messages_from_responses_input("hi", "rules")
    system_item = {"role": "system", "content": [{"type": "input_text", "text": "rules"}]}
    as_item = visible_messages_from_responses_input(
        [system_item, {"role": "user", "content": "hi"}], None
    )
    assert with_instructions != as_item
    assert (
        visible_messages_from_responses_input([{"role": "system", "content": "rules"}], None)
        is None
    )


@pytest.mark.parametrize(
    "items",
    [
        [{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}],
        [{"role": "user", "content": [{"type": "input_text", "text": "x", "extra": 1}]}],
        [{"role": "user", "content": []}],
        [{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"}],
        [{"type": "item_reference", "id": "msg_1"}],
        [{"type": "web_search_call", "id": "ws_1"}],
        [{"role": "assistant", "content": "plain string"}],
        [{"role": "assistant", "content": []}],
        [assistant_item("")],
        [assistant_item("x", annotations=[{"type": "url_citation"}])],
        [{"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}],
        [{"role": "assistant", "content": [
            {"type": "output_text", "text": "a"}, {"type": "output_text", "text": "b"}]}],
        [{**assistant_item("x"), "id": "msg_1", "status": "completed"}],
        [{**FUNCTION_CALL, "id": "fc_1"}],
        [{**FUNCTION_CALL, "status": "completed"}],
        [{**FUNCTION_CALL, "arguments": {}}],
        [{**OUTPUT, "output": [{"type": "input_text", "text": "ok"}]}],
        [{"role": "system", "content": "collides with instructions"}],
        [{"role": "critic", "content": "x"}],
        [{"content": "no role"}],
        ["not an item"],
        {"role": "user"},
        None,
    ],
)  # fmt: skip
def test_inexact_responses_input_is_underivable(items: Any) -> None:
    assert visible_messages_from_responses_input(items, None) is None


def test_non_string_instructions_are_underivable() -> None:
    assert visible_messages_from_responses_input("hi", ["rules"]) is None


def test_responses_input_spans_cover_each_visible_message() -> None:
    items = [
        {"role": "user", "content": "hi"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "t"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "r1"},
        {"type": "function_call_output", "call_id": "c2", "output": "r2"},
        {"type": "function_call", "call_id": "c3", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c3", "output": "r3"},
    ]
    history = visible_history_from_responses_input(items, "rules")
    assert history is not None
    messages, spans = history
    assert [m["role"] for m in messages] == [
        "system", "user", "assistant", "tool", "tool", "assistant", "tool",
    ]  # fmt: skip
    assert spans == (None, (0, 1), (1, 4), (4, 5), (5, 6), (6, 7), (7, 8))
    assert visible_history_from_responses_input("hi", None) == (
        [{"role": "user", "content": "hi"}],
        (None,),
    )
