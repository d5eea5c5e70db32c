"""relay.translate.chat_to_responses: one rule per test, exact outputs."""

from __future__ import annotations

from typing import Any

import pytest

from relay.errors import InvalidRequest, UnsupportedParameter
from relay.settings.model_alias import ModelAlias
from relay.translate.chat_to_responses import TranslatedRequest, droppable_in
from relay.translate.request import translate_request

GPT5 = ModelAlias("gpt-5", "gpt-5")
GPT4O = ModelAlias("gpt-4o", "gpt-4o")


def translate(
    body: dict[str, Any], target: ModelAlias = GPT5, *, summaries: bool = False
) -> TranslatedRequest:
    return translate_request(body, target, reasoning_summaries=summaries)


def chat(*messages: dict[str, Any], **params: Any) -> dict[str, Any]:
    return {"model": "gpt-5", "messages": list(messages), **params}


def user(text: str = "hi") -> dict[str, Any]:
    return {"role": "user", "content": text}


def user_item(text: str = "hi") -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "input_text", "text": text}]}


def upstream(body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return translate(body, **kwargs).upstream_body


# --- the request as a whole --------------------------------------------------------------


def test_minimal_request() -> None:
    result = translate(chat(user("hello")))
    assert result == TranslatedRequest(
        upstream_body={"model": "gpt-5", "input": [user_item("hello")]},
        stream=False,
        include_usage=False,
        client_model="gpt-5",
        caller=None,
        shape="chat",
        message_spans=((0, 1),),
    )


def test_alias_resolves_upstream_model_but_client_model_is_echoed() -> None:
    result = translate({"model": "fast", "messages": [user()]}, ModelAlias("fast", "gpt-4o"))
    assert result.upstream_body["model"] == "gpt-4o"
    assert result.client_model == "fast"


@pytest.mark.parametrize(
    ("params", "stream", "include_usage"),
    [
        ({}, False, False),
        ({"stream": True}, True, False),
        ({"stream": None}, False, False),
        ({"stream": True, "stream_options": {"include_usage": True}}, True, True),
        ({"stream": True, "stream_options": {"include_usage": False}}, True, False),
        ({"stream": True, "stream_options": None}, True, False),
    ],
)
def test_stream_flags(params: dict[str, Any], stream: bool, include_usage: bool) -> None:
    result = translate(chat(user(), **params))
    assert (result.stream, result.include_usage) == (stream, include_usage)
    assert "stream" not in result.upstream_body
    assert "stream_options" not in result.upstream_body


def test_user_becomes_caller_and_is_forwarded_as_user() -> None:
    result = translate(chat(user(), user="cursor-user-1"))
    assert result.caller == "cursor-user-1"
    assert result.upstream_body["user"] == "cursor-user-1"
    assert "safety_identifier" not in result.upstream_body


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("metadata", {"a": "b"}),
        ("safety_identifier", "sid"),
        ("prompt_cache_key", "pck"),
        ("prompt_cache_retention", "24h"),
        ("service_tier", "flex"),
        ("store", False),
        ("include", ["reasoning.encrypted_content"]),
        ("parallel_tool_calls", False),
        ("truncation", "auto"),
    ],
)
def test_passthrough_parameters(key: str, value: Any) -> None:
    assert upstream(chat(user(), **{key: value}))[key] == value
    assert key not in upstream(chat(user(), **{key: None}))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("metadata", {"a": 1}),
        ("metadata", "x"),
        ("store", "false"),
        ("include", "reasoning.encrypted_content"),
        ("include", [1]),
        ("user", 7),
        ("parallel_tool_calls", 1),
        ("truncation", True),
    ],
)
def test_passthrough_parameters_are_type_checked(key: str, value: Any) -> None:
    with pytest.raises(InvalidRequest) as info:
        translate(chat(user(), **{key: value}))
    assert info.value.param == key


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


# --- tools -------------------------------------------------------------------------------


def test_tools_are_flattened_and_non_strict_by_default() -> None:
    tools = [
        {"type": "function", "function": {"name": "read", "description": "Read a file",
                                          "parameters": {"type": "object", "properties": {}}}},
        {"type": "function", "function": {"name": "now"}},
        {"type": "function", "function": {"name": "s", "strict": True,
                                          "parameters": {"type": "object"}}},
    ]  # fmt: skip
    out = upstream(chat(user(), tools=tools, tool_choice="auto", parallel_tool_calls=True))
    assert out["tools"] == [
        {"type": "function", "name": "read", "description": "Read a file",
         "parameters": {"type": "object", "properties": {}}, "strict": False},
        {"type": "function", "name": "now",
         "parameters": {"type": "object", "properties": {}}, "strict": False},
        {"type": "function", "name": "s", "parameters": {"type": "object"}, "strict": True},
    ]  # fmt: skip
    assert out["tool_choice"] == "auto"
    assert out["parallel_tool_calls"] is True


@pytest.mark.parametrize("tools", [None, []])
def test_no_tools(tools: Any) -> None:
    out = upstream(chat(user(), tools=tools, tool_choice="auto"))
    assert "tools" not in out
    assert "tool_choice" not in out  # "auto" without tools means nothing


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("none", "none"),
        ("auto", "auto"),
        ("required", "required"),
        ({"type": "function", "function": {"name": "read"}}, {"type": "function", "name": "read"}),
    ],
)
def test_tool_choice(choice: Any, expected: Any) -> None:
    tools = [{"type": "function", "function": {"name": "read"}}]
    assert upstream(chat(user(), tools=tools, tool_choice=choice))["tool_choice"] == expected


def test_forced_tool_choice_without_tools_is_forwarded_for_upstream_to_judge() -> None:
    assert upstream(chat(user(), tool_choice="required"))["tool_choice"] == "required"


@pytest.mark.parametrize(
    ("params", "param", "error"),
    [
        ({"tools": {}}, "tools", InvalidRequest),
        ({"tools": ["x"]}, "tools[0]", InvalidRequest),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type", UnsupportedParameter),
        ({"tools": [{"type": "custom", "custom": {}}]}, "tools[0].custom.name", InvalidRequest),
        ({"tools": [{"type": "custom", "custom": {"name": "x", "format": {"type": "json"}}}]},
         "tools[0].custom.format", InvalidRequest),
        ({"tools": [{"type": "custom", "custom": {"name": "x", "format": {
            "type": "grammar", "grammar": {"syntax": "ebnf", "definition": "x"}}}}]},
         "tools[0].custom.format", InvalidRequest),
        ({"tools": [{"type": "function"}]}, "tools[0].function", InvalidRequest),
        ({"tools": [{"type": "function", "function": {}}]}, "tools[0].function.name",
         InvalidRequest),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]},
         "tools[0].function.parameters", InvalidRequest),
        ({"tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}]},
         "tools[0].function.strict", InvalidRequest),
        ({"tools": [{"type": "function", "function": {"name": "f", "description": 1}}]},
         "tools[0].function.description", InvalidRequest),
        ({"tool_choice": "any"}, "tool_choice", InvalidRequest),
        ({"tool_choice": {"type": "function", "function": {}}}, "tool_choice.function.name",
         InvalidRequest),
        ({"tool_choice": {"type": "allowed_tools"}}, "tool_choice", InvalidRequest),
    ],
)  # fmt: skip
def test_invalid_tools(params: dict[str, Any], param: str, error: type[Exception]) -> None:
    with pytest.raises(error) as info:
        translate(chat(user(), **params))
    assert type(info.value) is error
    assert info.value.param == param  # type: ignore[attr-defined]


# --- output controls ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "text"),
    [
        ({"response_format": {"type": "text"}}, None),
        ({"response_format": None}, None),
        ({"response_format": {"type": "json_object"}}, {"format": {"type": "json_object"}}),
        (
            {"response_format": {"type": "json_schema", "json_schema": {
                "name": "answer", "schema": {"type": "object"}, "strict": True,
                "description": "The answer"}}},
            {"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"},
                        "description": "The answer", "strict": True}},
        ),
        (
            {"response_format": {"type": "json_schema",
                                 "json_schema": {"name": "a", "schema": {}}}},
            {"format": {"type": "json_schema", "name": "a", "schema": {}}},
        ),
        ({"verbosity": "low"}, {"verbosity": "low"}),
        ({"verbosity": "high", "response_format": {"type": "json_object"}},
         {"verbosity": "high", "format": {"type": "json_object"}}),
    ],
)  # fmt: skip
def test_response_format(params: dict[str, Any], text: Any) -> None:
    assert upstream(chat(user(), **params)).get("text") == text


@pytest.mark.parametrize(
    ("response_format", "param"),
    [
        ("json", "response_format"),
        ({"type": "yaml"}, "response_format.type"),
        ({"type": "json_schema"}, "response_format.json_schema"),
        ({"type": "json_schema", "json_schema": {"schema": {}}},
         "response_format.json_schema.name"),
        ({"type": "json_schema", "json_schema": {"name": "a"}},
         "response_format.json_schema.schema"),
        ({"type": "json_schema", "json_schema": {"name": "a", "schema": {}, "strict": 1}},
         "response_format.json_schema.strict"),
    ],
)  # fmt: skip
def test_invalid_response_format(response_format: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        translate(chat(user(), response_format=response_format))
    assert info.value.param == param


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"max_tokens": 100}, 100),
        ({"max_completion_tokens": 200}, 200),
        ({"max_tokens": 300, "max_completion_tokens": 300}, 300),
        ({"max_tokens": None, "max_completion_tokens": 50}, 50),
        ({}, None),
    ],
)
def test_max_output_tokens(params: dict[str, Any], expected: int | None) -> None:
    assert upstream(chat(user(), **params)).get("max_output_tokens") == expected


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"max_tokens": 100, "max_completion_tokens": 200}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_completion_tokens": "10"}, "max_completion_tokens"),
        ({"max_completion_tokens": 1.5}, "max_completion_tokens"),
        ({"max_completion_tokens": True}, "max_completion_tokens"),
    ],
)
def test_invalid_max_tokens(params: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        translate(chat(user(), **params))
    assert info.value.param == param


# --- reasoning -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "target", "summaries", "expected"),
    [
        ({}, GPT5, False, None),
        ({"reasoning_effort": "low"}, GPT5, False, {"effort": "low"}),
        ({"reasoning": {"effort": "minimal"}}, GPT5, False, {"effort": "minimal"}),
        # both given and different: the documented Chat field wins
        ({"reasoning_effort": "high", "reasoning": {"effort": "minimal"}}, GPT5, False,
         {"effort": "high"}),
        ({"reasoning": {"effort": "low", "summary": "detailed"}}, GPT5, False,
         {"effort": "low", "summary": "detailed"}),
        ({"reasoning_effort": "high", "reasoning": {"summary": "concise"}}, GPT5, False,
         {"effort": "high", "summary": "concise"}),
        # alias defaults fill what the request left out
        ({}, ModelAlias("gpt-high", "gpt-5", "high"), False, {"effort": "high"}),
        ({"reasoning_effort": "low"}, ModelAlias("gpt-high", "gpt-5", "high"), False,
         {"effort": "low"}),
        ({}, ModelAlias("g", "gpt-5", None, "concise"), False, {"summary": "concise"}),
        # summaries streamed to the client: ask for them on reasoning models only
        ({}, GPT5, True, {"summary": "auto"}),
        ({"reasoning_effort": "low"}, GPT5, True, {"effort": "low", "summary": "auto"}),
        ({}, ModelAlias("g", "gpt-5", None, "detailed"), True, {"summary": "detailed"}),
        ({}, GPT4O, True, None),
        ({"reasoning": {"summary": "none"}}, GPT5, True, None),
        ({}, ModelAlias("g", "gpt-5", "low", "none"), True, {"effort": "low"}),
        ({"reasoning_effort": None, "reasoning": None}, GPT5, False, None),
    ],
)  # fmt: skip
def test_reasoning(
    params: dict[str, Any], target: ModelAlias, summaries: bool, expected: Any
) -> None:
    assert (
        upstream(chat(user(), **params), target=target, summaries=summaries).get("reasoning")
        == expected
    )


@pytest.mark.parametrize(
    ("params", "param", "error"),
    [
        ({"reasoning_effort": 3}, "reasoning_effort", InvalidRequest),
        ({"reasoning": "high"}, "reasoning", InvalidRequest),
        ({"reasoning": {"effort": 1}}, "reasoning.effort", InvalidRequest),
        ({"reasoning": {"summary": True}}, "reasoning.summary", InvalidRequest),
        ({"reasoning": {"generate_summary": "auto"}}, "reasoning.generate_summary",
         UnsupportedParameter),
    ],
)  # fmt: skip
def test_invalid_reasoning(params: dict[str, Any], param: str, error: type[Exception]) -> None:
    with pytest.raises(error) as info:
        translate(chat(user(), **params))
    assert type(info.value) is error
    assert info.value.param == param  # type: ignore[attr-defined]


# --- sampling ------------------------------------------------------------------------------


def test_cursor_temperature_zero_is_dropped_for_gpt5() -> None:
    assert "temperature" not in upstream(chat(user(), temperature=0))


def test_temperature_is_forwarded_for_non_reasoning_models() -> None:
    out = upstream({"model": "gpt-4o", "messages": [user()], "temperature": 0, "top_p": 0.5},
                   target=GPT4O)  # fmt: skip
    assert (out["temperature"], out["top_p"]) == (0, 0.5)


def test_alias_sampling_policy_overrides_the_family_rule() -> None:
    alias = ModelAlias("gpt-5", "gpt-5", sampling="forward")
    assert upstream(chat(user(), temperature=0), target=alias)["temperature"] == 0


def test_invalid_temperature() -> None:
    with pytest.raises(InvalidRequest) as info:
        translate(chat(user(), temperature=3))
    assert info.value.param == "temperature"


# --- parameters without a Responses equivalent ------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("n", 2),
        ("n", "1"),
        ("stop", "\n"),
        ("stop", ["END"]),
        ("logit_bias", {"50256": -100}),
        ("logprobs", True),
        ("top_logprobs", 2),
        ("presence_penalty", 0.5),
        ("frequency_penalty", -1),
        ("seed", 42),
        ("functions", [{"name": "f"}]),
        ("function_call", "auto"),
        ("audio", {"voice": "alloy", "format": "wav"}),
        ("modalities", ["text", "audio"]),
        ("prediction", {"type": "content", "content": "x"}),
        ("web_search_options", {}),
        ("best_of", 2),
        ("foo", "bar"),
        ("previous_response_id", "resp_1"),
    ],
)
def test_unsupported_parameters_name_the_key(key: str, value: Any) -> None:
    with pytest.raises(UnsupportedParameter) as info:
        translate(chat(user(), **{key: value}))
    assert info.value.param == key
    assert f"'{key}'" in info.value.message
    assert "remove" in info.value.message or "send" in info.value.message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("n", 1),
        ("n", None),
        ("stop", None),
        ("stop", []),
        ("logit_bias", {}),
        ("logprobs", False),
        ("top_logprobs", 0),
        ("presence_penalty", 0),
        ("frequency_penalty", 0.0),
        ("seed", None),
        ("functions", None),
        ("function_call", None),
        ("audio", None),
        ("modalities", ["text"]),
        ("prediction", None),
        ("web_search_options", None),
    ],
)
def test_neutral_values_are_accepted_and_not_forwarded(key: str, value: Any) -> None:
    assert upstream(chat(user(), **{key: value})) == {"model": "gpt-5", "input": [user_item()]}


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


@pytest.mark.parametrize(("extra", "dropped"), [
    ({}, ()),
    ({"stop": "\n", "seed": 1}, ("seed", "stop")),
    ({"n": 2, "logprobs": True, "top_logprobs": 3}, ("logprobs", "n", "top_logprobs")),
    ({"presence_penalty": 0.5, "frequency_penalty": 0.1, "logit_bias": {"1": 2}},
     ("frequency_penalty", "logit_bias", "presence_penalty")),
    ({"prediction": {"type": "content", "content": "x"}}, ("prediction",)),
    ({"n": 1, "stop": [], "seed": None, "logprobs": False}, ()),  # neutral: nothing to drop
    ({"functions": [{"name": "f"}], "audio": {"voice": "a"}, "foo": 1}, ()),  # never dropped
])  # fmt: skip
def test_what_the_opt_in_may_drop(extra: dict[str, Any], dropped: tuple[str, ...]) -> None:
    assert droppable_in(chat(user(), **extra)) == dropped


def test_a_droppable_parameter_s_400_names_the_opt_in() -> None:
    with pytest.raises(UnsupportedParameter) as info:
        translate(chat(user(), stop="END"))
    assert info.value.message.endswith(
        "remove 'stop' (or start the relay with RELAY_DROP_UNSUPPORTED_PARAMS=1 to drop it)"
    )
    with pytest.raises(UnsupportedParameter) as info:
        translate(chat(user(), functions=[{"name": "f"}]))
    assert "RELAY_DROP_UNSUPPORTED_PARAMS" not in info.value.message
