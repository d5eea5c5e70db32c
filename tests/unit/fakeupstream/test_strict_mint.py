"""fakeupstream.strict_chat: minted reasoning_content, recognizing it, and the probe."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from fakeupstream.strict_chat import (
    AssistantTurn,
    ChatContinuity,
    EmptyLedger,
    ThoughtSeal,
    assistant_key,
    content_text,
    probe_chat,
)

SEAL = ThoughtSeal(b"m" * 32)
CALL: dict[str, Any] = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "read", "arguments": '{"path": "a.txt", "n": 1}'},
        }
    ],
}
TEXT = {"role": "assistant", "content": "Hello."}


def test_minted_reasoning_is_the_text_and_a_signature():
    value = SEAL.mint("Thinking about: hi", assistant_key(CALL), "0a1b2c3d")
    assert re.fullmatch(r"Thinking about: hi #0a1b2c3d[0-9a-f]{16}", value)
    assert SEAL.recognizes(value, assistant_key(CALL))


def test_minting_is_deterministic_per_nonce_and_secret():
    key = assistant_key(CALL)
    assert SEAL.mint("t", key, "00000001") == SEAL.mint("t", key, "00000001")
    assert SEAL.mint("t", key, "00000001") != SEAL.mint("t", key, "00000002")
    other = ThoughtSeal(b"n" * 32)
    assert other.mint("t", key, "00000001") != SEAL.mint("t", key, "00000001")
    assert not other.recognizes(SEAL.mint("t", key, "00000001"), key)


@pytest.mark.parametrize(
    "forge",
    [
        lambda v: v.replace("Thinking", "thinking"),  # the text altered
        lambda v: v[:-1] + ("0" if v[-1] != "0" else "1"),  # the signature altered
        lambda v: v + " ",
        lambda v: v.split(" #")[0],  # the signature stripped
        lambda v: "",
        lambda v: "#" + v,
    ],
)
def test_altered_reasoning_is_not_recognized(forge):
    key = assistant_key(CALL)
    assert not SEAL.recognizes(forge(SEAL.mint("Thinking about: hi", key, "cafef00d")), key)


def test_reasoning_is_bound_to_its_message():
    value = SEAL.mint("t", assistant_key(CALL), "12345678")
    other_call = json.loads(json.dumps(CALL))
    other_call["tool_calls"][0]["id"] = "call_2"
    assert not SEAL.recognizes(value, assistant_key(other_call))
    assert not SEAL.recognizes(value, assistant_key(TEXT))


def test_the_message_key_sees_only_what_a_client_sees():
    same = json.loads(json.dumps(CALL))
    same["tool_calls"][0]["function"]["arguments"] = '{"n":1,"path":"a.txt"}'  # re-serialized
    same["tool_calls"][0]["index"] = 0  # Cursor adds an index
    same["content"] = ""  # null and "" are the same empty text
    same["name"] = "ignored"
    assert assistant_key(same) == assistant_key(CALL)
    parts = {
        "role": "assistant",
        "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo."}],
    }
    assert assistant_key(parts) == assistant_key(TEXT)
    changed = json.loads(json.dumps(CALL))
    changed["tool_calls"][0]["function"]["arguments"] = '{"path": "b.txt", "n": 1}'
    assert assistant_key(changed) != assistant_key(CALL)
    assert assistant_key({**TEXT, "content": "Hello"}) != assistant_key(TEXT)


def test_content_text():
    assert content_text(None) == ""
    assert content_text("x") == "x"
    assert content_text([{"type": "text", "text": "a"}, {"type": "image_url"}, "junk"]) == "a"
    assert content_text(7) == ""


def test_seal_needs_a_real_key_and_nonce():
    with pytest.raises(ValueError, match="at least 16 bytes"):
        ThoughtSeal(b"short")
    with pytest.raises(ValueError, match="8 hex"):
        SEAL.mint("t", "k", "123")


def test_empty_ledger_is_bounded_and_ordered():
    ledger = EmptyLedger(limit=2)
    for key in ("a", "b", "c"):
        ledger.add(key)
    assert "a" not in ledger
    assert "b" in ledger
    assert "c" in ledger
    ledger.clear()
    assert "c" not in ledger


# --- the probe ------------------------------------------------------------------------


def signed(message: dict[str, Any]) -> dict[str, Any]:
    return {**message, "reasoning_content": SEAL.mint("t", assistant_key(message), "00c0ffee")}


def test_probe_classifies_every_assistant_message():
    user = {"role": "user", "content": "hi"}
    tool = {"role": "tool", "tool_call_id": "call_1", "content": "ok"}
    messages = [
        {"role": "system", "content": "s"},
        user,
        signed(TEXT),  # 2 exact
        user,
        {**CALL, "reasoning_content": signed(TEXT)["reasoning_content"]},  # 4 wrong: moved
        tool,
        user,
        CALL,  # 7 missing
        tool,
        {**TEXT, "reasoning_content": None},  # 9 missing: null
        {**TEXT, "reasoning_content": ""},  # 10 wrong: "" for a message minted with text
        {**TEXT, "reasoning_content": 5},  # 11 wrong: not even a string
        signed(CALL),  # 12 exact
        "not a message",
    ]
    report = probe_chat(messages, SEAL.recognizes)
    assert report.turns == (
        AssistantTurn(2, "exact", 0),
        AssistantTurn(4, "wrong", 1),
        AssistantTurn(7, "missing", 1),
        AssistantTurn(9, "missing", 0),
        AssistantTurn(10, "wrong", 0),
        AssistantTurn(11, "wrong", 0),
        AssistantTurn(12, "exact", 1),
    )
    assert report.summary() == "continuity: restored=5 exact=2 wrong=3 missing=2"
    assert report.state_at(7) == "missing"
    assert report.state_at(1) is None
    assert report.to_json() == {
        "restored": 5,
        "exact": 2,
        "wrong": 3,
        "missing": 2,
        "items": [
            {"index": 2, "state": "exact", "tool_calls": 0},
            {"index": 4, "state": "wrong", "tool_calls": 1},
            {"index": 7, "state": "missing", "tool_calls": 1},
            {"index": 9, "state": "missing", "tool_calls": 0},
            {"index": 10, "state": "wrong", "tool_calls": 0},
            {"index": 11, "state": "wrong", "tool_calls": 0},
            {"index": 12, "state": "exact", "tool_calls": 1},
        ],
    }


def test_probe_of_a_first_turn_is_empty():
    report = probe_chat([{"role": "user", "content": "hi"}], SEAL.recognizes)
    assert report == ChatContinuity()
    assert report.summary() == "continuity: restored=0 exact=0 wrong=0 missing=0"
