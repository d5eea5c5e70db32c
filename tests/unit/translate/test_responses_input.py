"""relay.translate.responses_input: Cursor's Responses-shaped body sent to /chat/completions."""

from __future__ import annotations

from typing import Any

import pytest

from relay.errors import InvalidRequest, UnsupportedParameter
from relay.settings.model_alias import ModelAlias
from relay.translate.request import translate_request
from relay.translate.request_types import TranslatedRequest
from relay.translate.responses_input import translate_responses_shape

CODEX = ModelAlias("gpt-5-codex", "gpt-5-codex")


def translate(
    body: dict[str, Any], target: ModelAlias = CODEX, *, summaries: bool = False
) -> TranslatedRequest:
    return translate_responses_shape(body, target, reasoning_summaries=summaries)


def test_cursor_codex_body() -> None:
    body = {
        "model": "gpt-5-codex",
        "instructions": "You are a coding agent.",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "call_1", "name": "ls", "arguments": "{"},
            {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
        ],
        "tools": [{"type": "function", "name": "ls", "parameters": {}, "strict": False}],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "stream": True,
        "temperature": 0,
        "user": "u1",
        "text": {"verbosity": "low"},
        "max_output_tokens": 1000,
        "prompt_cache_key": "k",
    }
    result = translate(body)
    assert result == TranslatedRequest(
        upstream_body={
            "model": "gpt-5-codex",
            "instructions": "You are a coding agent.",
            "input": body["input"],
            "reasoning": {"effort": "medium", "summary": "auto"},
            "tools": body["tools"],
            "tool_choice": "auto",
            "parallel_tool_calls": False,
            "store": False,
            "include": ["reasoning.encrypted_content"],
            "user": "u1",
            "text": {"verbosity": "low"},
            "max_output_tokens": 1000,
            "prompt_cache_key": "k",
        },
        stream=True,
        include_usage=False,
        client_model="gpt-5-codex",
        caller="u1",
        shape="responses",
        custom_tool_calls="function",
    )
    assert result.upstream_body["input"] is not body["input"]  # later stages may edit it


def test_dispatched_from_translate_request() -> None:
    result = translate_request({"model": "m", "input": "hi"}, ModelAlias("m", "gpt-4o"),
                               reasoning_summaries=False)  # fmt: skip
    assert result.shape == "responses"
    assert result.upstream_body == {"model": "gpt-4o", "input": "hi"}
    assert result.client_model == "m"


def test_string_input_and_nulls() -> None:
    body = {"model": "x", "input": "hello", "instructions": None, "tools": None, "store": None}
    assert translate(body).upstream_body == {"model": "gpt-5-codex", "input": "hello"}


def test_empty_tools_are_left_out() -> None:
    assert "tools" not in translate({"model": "x", "input": "hi", "tools": []}).upstream_body


def test_stream_options_are_consumed() -> None:
    result = translate(
        {"model": "x", "input": "hi", "stream": True, "stream_options": {"include_usage": True}}
    )
    assert (result.stream, result.include_usage) == (True, True)
    assert result.upstream_body == {"model": "gpt-5-codex", "input": "hi"}


def test_todays_cursor_field_set_is_accepted() -> None:
    """Every field Cursor 2.5+ sends GPT-5-family models: forwarded as sent, except
    stream_options (consumed: the Responses API rejects include_usage; the relay makes
    the usage chunk itself)."""
    fields = {
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "previous_response_id": None,
        "truncation": "auto",
        "prompt_cache_retention": "24h",
        "prompt_cache_key": "c-123",
        "reasoning": {"effort": "medium", "summary": "auto", "context": "all_turns"},
        "text": {"verbosity": "low"},
    }
    body = {"model": "x", "input": "hi", "stream": True,
            "stream_options": {"include_usage": True}, **fields}  # fmt: skip
    result = translate(body)
    assert (result.stream, result.include_usage) == (True, True)
    forwarded = {k: v for k, v in fields.items() if v is not None}
    assert result.upstream_body == {"model": "gpt-5-codex", "input": "hi", **forwarded}


@pytest.mark.parametrize(
    ("reasoning", "alias_context", "expected"),
    [
        ({"context": "current_turn"}, None, "current_turn"),
        ({}, "all_turns", "all_turns"),
        ({"context": "auto"}, "all_turns", "auto"),  # the client's value wins
        ({}, None, None),
    ],
)
def test_reasoning_context_passes_through_or_comes_from_the_alias(
    reasoning: dict[str, Any], alias_context: str | None, expected: str | None
) -> None:
    target = ModelAlias("c", "gpt-5.6", reasoning_context=alias_context)
    for translated in (
        translate({"model": "c", "input": "hi", "reasoning": reasoning}, target),
        translate_request({"model": "c", "messages": [{"role": "user", "content": "hi"}],
                           "reasoning": reasoning}, target, reasoning_summaries=False),
    ):  # fmt: skip
        sent = translated.upstream_body.get("reasoning") or {}
        assert sent.get("context") == expected


def test_previous_response_id_says_what_to_do() -> None:
    with pytest.raises(UnsupportedParameter) as info:
        translate({"model": "x", "input": "hi", "previous_response_id": "resp_1"})
    message = info.value.message
    assert message.startswith("'previous_response_id' is not supported: ")
    assert "store:false" in message
    assert "send the whole conversation in 'input'" in message
    assert "turned off" in message


@pytest.mark.parametrize(
    ("params", "target", "summaries", "expected"),
    [
        ({}, CODEX, False, None),
        ({}, ModelAlias("c", "gpt-5-codex", "high"), False, {"effort": "high"}),
        ({"reasoning": {"effort": "low"}}, ModelAlias("c", "gpt-5-codex", "high"), False,
         {"effort": "low"}),
        ({}, CODEX, True, {"summary": "auto"}),
        ({"reasoning": {"summary": "none"}}, CODEX, True, None),
    ],
)  # fmt: skip
def test_reasoning_defaults(
    params: dict[str, Any], target: ModelAlias, summaries: bool, expected: Any
) -> None:
    body = {"model": "x", "input": "hi", **params}
    assert translate(body, target, summaries=summaries).upstream_body.get("reasoning") == expected


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (CODEX, {}),
        (ModelAlias("c", "gpt-4.1"), {"temperature": 0, "top_p": 0.5}),
        (ModelAlias("c", "gpt-5-codex", sampling="forward"), {"temperature": 0, "top_p": 0.5}),
    ],
)
def test_sampling_rules_apply(target: ModelAlias, expected: dict[str, Any]) -> None:
    out = translate({"model": "x", "input": "hi", "temperature": 0, "top_p": 0.5}, target)
    sent = out.upstream_body
    assert {k: sent[k] for k in ("temperature", "top_p") if k in sent} == expected


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("previous_response_id", "resp_123"),
        ("conversation", "conv_1"),
        ("background", True),
    ],
)
def test_stateful_fields_are_refused(key: str, value: Any) -> None:
    with pytest.raises(UnsupportedParameter) as info:
        translate({"model": "x", "input": "hi", key: value})
    assert info.value.param == key
    assert "input" in info.value.message or "remove" in info.value.message


def test_neutral_stateful_values_are_accepted() -> None:
    body = {"model": "x", "input": "hi", "previous_response_id": None, "background": False}
    assert translate(body).upstream_body == {
        "model": "gpt-5-codex",
        "input": "hi",
        "background": False,  # kept as sent: it is the upstream default
    }


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "x", "input": 3}, "input"),
        ({"model": "x", "input": []}, "input"),
        ({"model": "x", "input": None}, "input"),
        ({"model": "x", "input": ["hi"]}, "input[0]"),
        ({"model": "x", "input": [{"role": "user", "content": "a"}, {"content": "b"}]}, "input[1]"),
        ({"model": "x", "input": [{"type": 5}]}, "input[0]"),
        ({"input": "hi"}, "model"),
        ({"model": "x", "input": "hi", "instructions": ["a"]}, "instructions"),
        ({"model": "x", "input": "hi", "stream": 1}, "stream"),
        ({"model": "x", "input": "hi", "reasoning": "high"}, "reasoning"),
        ({"model": "x", "input": "hi", "store": "no"}, "store"),
        ({"model": "x", "input": "hi", "include": "x"}, "include"),
        ({"model": "x", "input": "hi", "user": 1}, "user"),
        ({"model": "x", "input": "hi", "tools": {}}, "tools"),
        ({"model": "x", "input": "hi", "temperature": 9}, "temperature"),
    ],
)
def test_invalid_bodies_name_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        translate(body)
    assert info.value.param == param
