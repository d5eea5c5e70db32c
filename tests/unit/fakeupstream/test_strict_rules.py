"""fakeupstream.strict_chat rules: every strictness rule, its exact text, and its settings."""

from __future__ import annotations

from typing import Any

import pytest

from fakeupstream.rules import ApiError
from fakeupstream.scripts import Reasoning, ScriptError, parse_script
from fakeupstream.strict_chat import (
    DEEPSEEK_MESSAGE,
    RULES,
    ChatContinuity,
    StrictError,
    Strictness,
    ThoughtSeal,
    assistant_key,
    check_strict,
    parse_strictness,
    probe_chat,
    rejection,
)

SEAL = ThoughtSeal(b"r" * 32)
DEEPSEEK = "The reasoning_content in the thinking mode must be passed back to the API."
LEGACY = (
    "reasoning_content is not accepted in input messages by this model; remove it from the "
    "message at message index {i}."
)


def signed(message: dict[str, Any], text: str = "Thinking") -> dict[str, Any]:
    """The message with the reasoning_content the fake would have minted for it."""
    return {**message, "reasoning_content": SEAL.mint(text, assistant_key(message), "0badc0de")}


SYSTEM: dict[str, Any] = {"role": "system", "content": "be brief"}
USER: dict[str, Any] = {"role": "user", "content": "hi"}
CALL: dict[str, Any] = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    ],
}
TOOL: dict[str, Any] = {"role": "tool", "tool_call_id": "call_1", "content": "42"}
TEXT: dict[str, Any] = {"role": "assistant", "content": "Hello there."}
TOOLS = [{"type": "function", "function": {"name": "read", "parameters": {}}}]


def run(messages: list[dict[str, Any]], strictness: Strictness, *, has_tools: bool = True) -> None:
    report = probe_chat(messages, SEAL.recognizes)
    check_strict(messages, report, strictness, has_tools=has_tools)


def reject(messages: list[dict[str, Any]], strictness: Strictness, **kw: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        run(messages, strictness, **kw)
    return caught.value


def conversation(call: dict[str, Any], text: dict[str, Any]) -> list[dict[str, Any]]:
    # indexes: 0 system, 1 user, 2 text turn, 3 user, 4 tool-call turn, 5 tool, 6 user
    return [SYSTEM, USER, text, USER, call, TOOL, USER]


CHECKING = ("tool_turns", "tool_turns_indexed", "kimi", "all_turns_with_tools")

# (rule, prefix, expected text for an offending message at index 4)
TEXTS = [
    ("tool_turns", False, DEEPSEEK),
    ("tool_turns", True, "Param Incorrect: " + DEEPSEEK),
    ("tool_turns_indexed", False, "Missing `reasoning_content` field in the assistant message at message index 4."),
    ("tool_turns_indexed", True, "Param Incorrect: Missing `reasoning_content` field in the assistant message at message index 4."),
    ("kimi", False, "thinking is enabled but reasoning_content is missing in assistant tool call message at index 4"),
    ("kimi", True, "Param Incorrect: thinking is enabled but reasoning_content is missing in assistant tool call message at index 4"),
    ("all_turns_with_tools", False, DEEPSEEK),
    ("all_turns_with_tools", True, "Param Incorrect: " + DEEPSEEK),
]  # fmt: skip


def test_every_rule_is_covered_here():
    assert set(RULES) == {*CHECKING, "legacy_rejects", "off"}
    assert DEEPSEEK_MESSAGE == DEEPSEEK


@pytest.mark.parametrize(("rule", "prefix", "text"), TEXTS)
@pytest.mark.parametrize(
    "damage",
    ["drop", "null", "empty", "altered", "foreign"],
)
def test_a_tool_call_turn_without_its_exact_reasoning_is_rejected(rule, prefix, text, damage):
    call = signed(CALL)
    if damage == "drop":
        call.pop("reasoning_content")
    elif damage == "null":
        call["reasoning_content"] = None
    elif damage == "empty":
        call["reasoning_content"] = ""
    elif damage == "altered":
        call["reasoning_content"] = call["reasoning_content"].replace("Thinking", "Thinkin")
    else:  # a reasoning_content the fake never minted
        call["reasoning_content"] = "I thought hard. #0123456789abcdef01234567"
    error = reject(conversation(call, signed(TEXT)), Strictness(rule, prefix))
    assert (error.status, error.message, error.type) == (400, text, "invalid_request_error")
    assert error.envelope() == {
        "error": {"message": text, "type": "invalid_request_error", "param": None, "code": None}
    }


@pytest.mark.parametrize("rule", CHECKING)
def test_the_exact_reasoning_passes_every_rule(rule):
    run(conversation(signed(CALL), signed(TEXT)), Strictness(rule))


@pytest.mark.parametrize(
    ("rule", "has_tools", "rejected"),
    [
        ("tool_turns", True, False),  # documentation: only tool-call turns need it
        ("tool_turns_indexed", True, False),
        ("kimi", True, False),
        ("all_turns_with_tools", True, True),  # a gateway: every turn, once tools is present
        ("all_turns_with_tools", False, False),
        ("off", True, False),
    ],
)
def test_plain_text_turns_need_reasoning_only_under_all_turns_with_tools(rule, has_tools, rejected):
    messages = conversation(signed(CALL), TEXT)  # the text turn (index 2) lacks it
    if rejected:
        assert reject(messages, Strictness(rule), has_tools=has_tools).message == DEEPSEEK
    else:
        run(messages, Strictness(rule), has_tools=has_tools)


def test_all_turns_with_tools_still_checks_tool_turns_without_tools():
    error = reject(
        conversation(CALL, signed(TEXT)), Strictness("all_turns_with_tools"), has_tools=False
    )
    assert error.message == DEEPSEEK


def test_the_first_offending_message_is_named():
    second = {**CALL, "tool_calls": [{**CALL["tool_calls"][0], "id": "call_2"}]}
    messages = [USER, CALL, TOOL, second, {**TOOL, "tool_call_id": "call_2"}]
    assert reject(messages, Strictness("kimi")).message.endswith("at index 1")
    messages[1] = signed(CALL)
    assert reject(messages, Strictness("kimi")).message.endswith("at index 3")
    assert reject(messages, Strictness("tool_turns_indexed")).message.endswith("message index 3.")


def test_reasoning_moved_to_another_tool_turn_is_rejected():
    second = {**CALL, "tool_calls": [{**CALL["tool_calls"][0], "id": "call_2"}]}
    first = signed(CALL)
    moved = {**second, "reasoning_content": first["reasoning_content"]}
    messages = [USER, first, TOOL, moved, {**TOOL, "tool_call_id": "call_2"}]
    assert reject(messages, Strictness("kimi")).message.endswith("at index 3")


# --- legacy deepseek-reasoner ----------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "index"),
    [
        ([USER, signed(TEXT), USER], 1),
        ([USER, {**TEXT, "reasoning_content": ""}, USER], 1),  # "" is a sent field too
        ([USER, TEXT, USER, signed(CALL), TOOL], 3),
        ([{**USER, "reasoning_content": "odd"}, TEXT], 0),  # any role
    ],
)
@pytest.mark.parametrize("prefix", [False, True])
def test_legacy_rejects_any_sent_reasoning_content(messages, index, prefix):
    error = reject(messages, Strictness("legacy_rejects", prefix))
    expected = LEGACY.format(i=index)
    assert error.message == ("Param Incorrect: " + expected if prefix else expected)
    assert (error.status, error.type) == (400, "invalid_request_error")


def test_legacy_accepts_history_without_reasoning_content_and_null():
    run(
        [USER, TEXT, USER, CALL, TOOL, {**TEXT, "reasoning_content": None}],
        Strictness("legacy_rejects"),
    )


def test_off_accepts_anything():
    run([USER, CALL, TOOL, {**TEXT, "reasoning_content": "x"}], Strictness("off"))


# --- empty reasoning ---------------------------------------------------------------------


def test_empty_reasoning_passes_only_for_messages_minted_empty():
    minted_empty = {assistant_key(CALL)}

    def recognize(value: str, key: str) -> bool:
        return key in minted_empty if value == "" else SEAL.recognizes(value, key)

    messages = [USER, {**CALL, "reasoning_content": ""}, TOOL]
    check_strict(messages, probe_chat(messages, recognize), Strictness(), has_tools=True)
    minted_empty.clear()
    with pytest.raises(ApiError):
        check_strict(messages, probe_chat(messages, recognize), Strictness(), has_tools=True)


# --- settings -----------------------------------------------------------------------------


def test_rejection_formats_the_index():
    assert rejection(Strictness("kimi"), 2).message.endswith("message at index 2")
    assert rejection(Strictness("tool_turns"), 9).message == DEEPSEEK


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("kimi", Strictness("kimi")),
        ({"rule": "off"}, Strictness("off")),
        ({"prefix": True}, Strictness("tool_turns", True)),
        ({"rule": "legacy_rejects", "prefix": True}, Strictness("legacy_rejects", True)),
    ],
)
def test_parse_strictness(raw, expected):
    assert parse_strictness(raw) == expected


def test_parse_strictness_keeps_what_is_not_given():
    base = Strictness("kimi", True)
    assert parse_strictness({"prefix": False}, base) == Strictness("kimi", False)
    assert parse_strictness("off", base) == Strictness("off", True)


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("strictest", "'strict.rule' must be one of tool_turns, tool_turns_indexed, kimi"),
        ({"rule": 3}, "'strict.rule' must be one of"),
        ({"prefix": "yes"}, "'strict.prefix' must be true or false"),
        ({"mode": "kimi"}, "unknown strict key(s) 'mode'; allowed: rule, prefix"),
        (["kimi"], "'strict' must be a rule name or an object"),
    ],
)
def test_bad_strictness_says_what_to_fix(raw, fragment):
    with pytest.raises(StrictError) as caught:
        parse_strictness(raw)
    assert fragment in str(caught.value)


def test_scripts_take_strict_and_reasoning_text():
    script = parse_script(
        {"strict": {"rule": "kimi", "prefix": True}, "output": [{"type": "reasoning", "text": "t"}]}
    )
    assert script.strict == Strictness("kimi", True)
    assert script.output == (Reasoning((), "t"),)
    assert parse_script({"strict": "off"}).strict == Strictness("off")
    assert parse_script({}).strict is None
    with pytest.raises(ScriptError, match=r"'strict\.rule' must be one of"):
        parse_script({"strict": "nope"})
    with pytest.raises(ScriptError, match="'text' must be a string"):
        parse_script({"output": [{"type": "reasoning", "text": 1}]})


def test_strictness_to_json():
    assert Strictness().to_json() == {"rule": "tool_turns", "prefix": False}
    assert ChatContinuity().to_json()["items"] == []
