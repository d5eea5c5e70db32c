"""relay.translate.tools: tools and tool_choice, one rule per test, exact outputs."""

from __future__ import annotations

from typing import Any

import pytest

from relay.errors import InvalidRequest, UnsupportedParameter
from tests.support.chat_cases import chat, translate, upstream, user

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
