"""relay.translate.chat_to_responses: the request as a whole, one rule per test, exact
outputs.
"""

from __future__ import annotations

from typing import Any

import pytest

from relay.errors import InvalidRequest
from relay.settings.model_alias import ModelAlias
from relay.translate.request_types import TranslatedRequest
from tests.support.chat_cases import chat, translate, upstream, user, user_item

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
