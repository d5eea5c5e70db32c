"""relay.translate.messages: Chat messages as Responses input items, one rule per test,
exact outputs.
"""

from __future__ import annotations

from typing import Any

import pytest

from relay.errors import InvalidRequest, UnsupportedParameter
from relay.translate.request import translate_request
from tests.support.chat_cases import GPT5, chat, translate, upstream, user, user_item

# --- messages ----------------------------------------------------------------------------


def test_leading_system_and_developer_messages_become_instructions() -> None:
    body = chat(
        {"role": "system", "content": "A"},
        {
            "role": "developer",
            "content": [{"type": "text", "text": "B1"}, {"type": "text", "text": "B2"}],
        },
        user("q"),
        {"role": "system", "content": "late"},
        {"role": "developer", "content": "later"},
        user("q2"),
    )
    out = upstream(body)
    assert out["instructions"] == "A\n\nB1B2"
    assert out["input"] == [
        user_item("q"),
        {"role": "system", "content": [{"type": "input_text", "text": "late"}]},
        {"role": "developer", "content": [{"type": "input_text", "text": "later"}]},
        user_item("q2"),
    ]


def test_no_instructions_without_leading_system_message() -> None:
    assert "instructions" not in upstream(chat(user()))


def test_system_after_an_omitted_assistant_message_is_not_leading() -> None:
    out = upstream(chat({"role": "assistant", "content": ""}, {"role": "system", "content": "S"}))
    assert "instructions" not in out
    assert out["input"] == [{"role": "system", "content": [{"type": "input_text", "text": "S"}]}]


def test_user_parts_text_and_images() -> None:
    body = chat(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "high"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        }
    )
    assert upstream(body)["input"] == [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "what is this?"},
                {"type": "input_image", "image_url": "https://x/y.png", "detail": "high"},
                {
                    "type": "input_image",
                    "image_url": "data:image/png;base64,AAAA",
                    "detail": "auto",
                },
            ],
        }
    ]


def test_user_name_is_accepted() -> None:
    assert upstream(chat({"role": "user", "content": "x", "name": "bob"}))["input"] == [
        user_item("x")
    ]


def test_assistant_text_and_tool_calls_as_cursor_sends_them() -> None:
    body = chat(
        user(),
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {"type": "function", "id": "call_1", "index": 0,
                 "function": {"name": "grep", "arguments": '{"pattern":"foo"}'}},
                {"type": "function", "id": "call_2", "index": 1,
                 "function": {"name": "grep", "arguments": '{"broken": '}},
            ],
        },
        {"role": "tool", "name": "grep", "tool_call_id": "call_1", "content": "1 match"},
        {"role": "tool", "tool_call_id": "call_2",
         "content": [{"type": "text", "text": "no "}, {"type": "text", "text": "match"}]},
    )  # fmt: skip
    assert upstream(body)["input"] == [
        user_item(),
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}],
        },
        {"type": "function_call", "call_id": "call_1", "name": "grep",
         "arguments": '{"pattern":"foo"}'},
        {"type": "function_call", "call_id": "call_2", "name": "grep", "arguments": '{"broken": '},
        {"type": "function_call_output", "call_id": "call_1", "output": "1 match"},
        {"type": "function_call_output", "call_id": "call_2", "output": "no match"},
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("assistant", "items"),
    [
        ({"content": None}, []),
        ({"content": ""}, []),
        ({}, []),
        ({"content": []}, []),
        (
            {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            [{"type": "message", "role": "assistant",
              "content": [{"type": "output_text", "text": "ab", "annotations": []}]}],
        ),
        (
            {"content": None, "refusal": "I can't."},
            [{"type": "message", "role": "assistant",
              "content": [{"type": "refusal", "refusal": "I can't."}]}],
        ),
        (
            {"content": [{"type": "text", "text": "t"}, {"type": "refusal", "refusal": "no"}]},
            [{"type": "message", "role": "assistant",
              "content": [{"type": "output_text", "text": "t", "annotations": []},
                          {"type": "refusal", "refusal": "no"}]}],
        ),
        (
            {"content": None, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}]},
            [{"type": "function_call", "call_id": "c", "name": "f", "arguments": ""}],
        ),
        ({"content": None, "tool_calls": None}, []),
        ({"content": "x", "tool_calls": []},
         [{"type": "message", "role": "assistant",
           "content": [{"type": "output_text", "text": "x", "annotations": []}]}]),
    ],
)  # fmt: skip
def test_assistant_message_forms(assistant: dict[str, Any], items: list[dict[str, Any]]) -> None:
    assert upstream(chat(user(), {"role": "assistant", **assistant}))["input"] == [
        user_item(),
        *items,
    ]


@pytest.mark.parametrize(
    ("message", "param"),
    [
        ({"role": "function", "name": "f", "content": "x"}, "messages[1].role"),
        ({"role": "bot", "content": "x"}, "messages[1].role"),
        ({"content": "x"}, "messages[1].role"),
        ("hello", "messages[1]"),
        ({"role": "user", "content": 5}, "messages[1].content"),
        ({"role": "user", "content": []}, "messages[1].content"),
        ({"role": "user", "content": None}, "messages[1].content"),
        ({"role": "user", "content": ["x"]}, "messages[1].content[0]"),
        ({"role": "user", "content": [{"type": "text", "text": 1}]}, "messages[1].content[0].text"),
        (
            {"role": "user", "content": [{"type": "text", "text": "a"},
                                         {"type": "input_audio", "input_audio": {}}]},
            "messages[1].content[1].type",
        ),
        ({"role": "user", "content": [{"type": "image_url", "image_url": "https://x"}]},
         "messages[1].content[0].image_url.url"),
        ({"role": "user", "content": [{"type": "image_url",
                                       "image_url": {"url": "https://x", "detail": "max"}}]},
         "messages[1].content[0].image_url.detail"),
        ({"role": "system", "content": None}, "messages[1].content"),
        ({"role": "system", "content": [{"type": "image_url", "image_url": {"url": "u"}}]},
         "messages[1].content[0].type"),
        ({"role": "assistant", "content": 3}, "messages[1].content"),
        ({"role": "assistant", "content": [{"type": "refusal", "refusal": 1}]},
         "messages[1].content[0].refusal"),
        ({"role": "assistant", "refusal": 1}, "messages[1].refusal"),
        ({"role": "assistant", "tool_calls": {}}, "messages[1].tool_calls"),
        ({"role": "assistant", "tool_calls": ["x"]}, "messages[1].tool_calls[0]"),
        ({"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f",
          "arguments": "{}"}}]}, "messages[1].tool_calls[0].id"),
        ({"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
          "function": {"name": "f", "arguments": {}}}]},
         "messages[1].tool_calls[0].function.arguments"),
        ({"role": "assistant", "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]},
         "messages[1].tool_calls[0].function.name"),
        ({"role": "assistant", "tool_calls": [{"id": "c", "index": "0",
          "function": {"name": "f", "arguments": "{}"}}]}, "messages[1].tool_calls[0].index"),
        ({"role": "assistant", "tool_calls": [{"id": "c"}]}, "messages[1].tool_calls[0].function"),
        ({"role": "tool", "content": "x"}, "messages[1].tool_call_id"),
        ({"role": "tool", "tool_call_id": "c", "content": None}, "messages[1].content"),
        ({"role": "tool", "tool_call_id": "c", "content": "x", "name": 3}, "messages[1].name"),
    ],
)  # fmt: skip
def test_invalid_messages_name_the_path(message: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        translate(chat(user(), message))
    assert type(info.value) is InvalidRequest
    assert info.value.param == param
    assert param.rsplit(".", 1)[-1].split("[", 1)[0] in info.value.message


@pytest.mark.parametrize(
    ("message", "param"),
    [
        ({"role": "assistant", "function_call": {"name": "f", "arguments": ""}},
         "messages[1].function_call"),
        ({"role": "assistant", "audio": {"id": "a"}}, "messages[1].audio"),
        ({"role": "assistant", "tool_calls": [{"id": "c", "type": "web_search",
          "web_search": {}}]}, "messages[1].tool_calls[0].type"),
    ],
)  # fmt: skip
def test_untranslatable_assistant_fields(message: Any, param: str) -> None:
    with pytest.raises(UnsupportedParameter) as info:
        translate(chat(user(), message))
    assert info.value.param == param


def test_function_role_message_says_what_to_send_instead() -> None:
    with pytest.raises(InvalidRequest, match="'tool' message"):
        translate(chat(user(), {"role": "function", "name": "f", "content": "x"}))


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "gpt-5", "messages": None}, "messages"),
        ({"model": "gpt-5", "messages": {"role": "user"}}, "messages"),
        ({"model": "gpt-5", "messages": []}, "messages"),
        ({"model": "gpt-5"}, "messages"),
        ({"messages": [user()]}, "model"),
        ({"model": "", "messages": [user()]}, "model"),
        ({"model": "gpt-5", "messages": [user()], "stream": "yes"}, "stream"),
        ({"model": "gpt-5", "messages": [user()], "stream_options": []}, "stream_options"),
        ({"model": "gpt-5", "messages": [user()], "stream_options": {"include_usage": "y"}},
         "stream_options.include_usage"),
    ],
)  # fmt: skip
def test_invalid_top_level(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        translate(body)
    assert info.value.param == param


def test_non_object_body() -> None:
    with pytest.raises(InvalidRequest, match="JSON object"):
        translate_request([], GPT5, reasoning_summaries=False)  # type: ignore[arg-type]


def test_missing_messages_says_what_to_send() -> None:
    with pytest.raises(InvalidRequest, match="'messages' is required") as info:
        translate({"model": "gpt-5", "prompt": "hi"})
    assert info.value.param == "messages"


def test_input_without_messages_is_the_responses_shape() -> None:
    result = translate({"model": "gpt-5", "input": "hi"})
    assert result.shape == "responses"
    assert result.upstream_body == {"model": "gpt-5", "input": "hi"}


def test_messages_win_over_input_and_input_is_then_unknown() -> None:
    with pytest.raises(UnsupportedParameter) as info:
        translate(chat(user(), input="hi"))
    assert info.value.param == "input"


@pytest.mark.parametrize(
    ("messages", "spans"),
    [
        pytest.param([user("a")], ((0, 1),), id="one-user"),
        pytest.param(
            [{"role": "system", "content": "s"}, {"role": "developer", "content": "d"}, user("a")],
            (None, None, (0, 1)),
            id="leading-system-become-instructions",
        ),
        pytest.param(
            [
                user("a"),
                {
                    "role": "assistant",
                    "content": "t",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        },
                        {
                            "id": "c2",
                            "type": "function",
                            "function": {"name": "g", "arguments": "{}"},
                        },
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "r1"},
                {"role": "tool", "tool_call_id": "c2", "content": "r2"},
                {"role": "system", "content": "late"},
            ],
            ((0, 1), (1, 4), (4, 5), (5, 6), (6, 7)),
            id="assistant-text-and-calls",
        ),
        pytest.param(
            [user("a"), {"role": "assistant", "content": None}, user("b")],
            ((0, 1), (1, 1), (1, 2)),
            id="empty-assistant-has-empty-span",
        ),
    ],
)
def test_message_spans_cover_each_message(
    messages: list[dict[str, Any]], spans: tuple[tuple[int, int] | None, ...]
) -> None:
    result = translate(chat(*messages))
    assert result.message_spans == spans
    items = result.upstream_body["input"]
    covered = [i for span in spans if span for i in range(*span)]
    assert covered == list(range(len(items)))
