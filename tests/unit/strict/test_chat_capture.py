"""relay.strict.chat_capture: accumulating the fake provider's real answers, and the capture key
agreeing with the history identity of the message the client sends back."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fakeupstream.fake import FakeUpstream
from fakeupstream.scripts import parse_script
from relay.core.history_digest import HistoryState, history_digests
from relay.core.predict import SentToolCall
from relay.core.receipts import Reason
from relay.core.scope import build_scope
from relay.strict.chat_capture import CapturedTurn, ChatCapture, capture_key, reasoning_of

TOOLS = [{"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}}]
USER = {"role": "user", "content": "CALL_TOOL please"}
SCRIPT = {
    "output": [
        {"type": "reasoning", "text": "Let me think, at length."},
        {"type": "message", "text": "Searching now."},
        {"type": "function_call", "name": "grep", "arguments": '{"q": "x", "n": 2}'},
        {"type": "function_call", "name": "grep", "arguments": "{}"},
    ],
    "deltas": 5,
}


def answer(stream: bool, script: dict[str, Any] = SCRIPT) -> list[Any]:
    fake = FakeUpstream(seed=3, secret=b"s" * 32)
    body = {"model": "deepseek-chat", "messages": [USER], "tools": TOOLS, "stream": stream}
    reply, _ = fake.answer_chat(body, parse_script(script))
    return reply.parsed


def captured(stream: bool, script: dict[str, Any] = SCRIPT) -> list[CapturedTurn]:
    capture = ChatCapture(max_bytes=1 << 20)
    parsed = answer(stream, script)
    if stream:
        for chunk in parsed[:-1]:
            capture.feed_chunk(chunk)
    else:
        capture.feed_completion(parsed[0])
    return capture.turns()


def scope_state(messages: list[Any]) -> HistoryState:
    scope = build_scope(
        secret=b"k" * 32, upstream_origin="http://p", endpoint="/v1/chat/completions",
        credential="sk", relay_token="t" * 16, caller=None,
        upstream_body={"model": "deepseek-chat"}, openai_beta=None, body_shape="strict-chat",
    )  # fmt: skip
    return history_digests(scope, messages, exclude_reasoning_content=True).final_state


def test_stream_and_json_capture_the_same_turn() -> None:
    streamed, whole = captured(True), captured(False)
    assert streamed == whole
    (turn,) = whole
    assert turn.reasoning.startswith("Let me think, at length. #")  # as the fake signed it
    assert turn.content == "Searching now."
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [
        ("grep", '{"q": "x", "n": 2}'),
        ("grep", "{}"),
    ]
    assert turn.calls_complete
    assert turn.tool_call_ids == tuple(c.id for c in turn.tool_calls)
    assert all(i.startswith("call_") for i in turn.tool_call_ids)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "echo",
    [
        lambda m: m,  # exactly as received, reasoning included
        lambda m: {k: v for k, v in m.items() if k != "reasoning_content"},  # Cursor drops it
        lambda m: {**m, "content": [{"type": "text", "text": m["content"]}]},  # parts form
    ],
    ids=["as-received", "reasoning-dropped", "parts"],
)
def test_capture_key_is_the_history_identity_of_the_echo(stream: bool, echo: Any) -> None:
    """The client re-serializes tool arguments (compact JSON) when it sends them back."""
    (turn,) = captured(stream)
    message = json.loads(json.dumps(answer(False)[0]["choices"][0]["message"]))
    for call in message["tool_calls"]:
        call["function"]["arguments"] = json.dumps(
            json.loads(call["function"]["arguments"]), separators=(",", ":")
        )
    key = capture_key(scope_state([USER]), turn)
    assert key.reason is None
    assert key.end_digest == scope_state([USER, echo(message)]).digest
    assert key.tool_call_ids == turn.tool_call_ids


def test_unpredictable_arguments_keep_the_tool_call_ids() -> None:
    turn = CapturedTurn(0, "r", "", None, (SentToolCall("call_1", "f", '{"x": 1.0}'),), True)
    key = capture_key(scope_state([USER]), turn)
    assert (key.end_digest, key.tool_call_ids, key.reason) == (
        None, ("call_1",), Reason.UNKNOWN_PREDICTION,
    )  # fmt: skip


def test_no_history_identity_keeps_the_tool_call_ids() -> None:
    turn = CapturedTurn(0, "r", "hi", None, (), True)
    assert capture_key(None, turn).reason is Reason.CANONICAL_LIMIT


def test_incomplete_calls_and_refusals_have_no_envelope() -> None:
    partial = CapturedTurn(0, "r", "", None, (SentToolCall("", "f", "{}"),), False)
    assert partial.envelope() is None
    refused = CapturedTurn(0, "r", "", "no", (), True)
    assert refused.envelope() is None
    plain = CapturedTurn(0, "r", "hello", None, (), True)
    assert plain.envelope() == {"role": "assistant", "content": "hello", "tool_calls": []}


def test_plain_text_answer() -> None:
    (turn,) = captured(True, {"output": [{"type": "message", "text": "Hi there"}], "deltas": 3})
    assert turn.content == "Hi there"
    assert turn.reasoning.startswith("Thinking about: CALL_TOOL please #")  # the default thought
    assert turn.tool_calls == ()


def test_several_choices_and_the_reasoning_spelling() -> None:
    capture = ChatCapture(max_bytes=1000)
    for index, text in ((1, "second"), (0, "first")):
        capture.feed_chunk({"choices": [{"index": index, "delta": {"reasoning": text}}]})
    capture.feed_chunk(
        {"choices": [{"index": 0, "delta": {"content": "a", "reasoning_content": None}}]}
    )
    capture.feed_chunk({"choices": [], "usage": {"total_tokens": 3}})
    capture.feed_chunk({"choices": "junk"})
    turns = capture.turns()
    assert [(t.index, t.reasoning, t.content) for t in turns] == [
        (0, "first", "a"),
        (1, "second", ""),
    ]
    assert reasoning_of({"reasoning_content": "a", "reasoning": "b"}) == "a"
    assert reasoning_of({"reasoning_content": None}) is None


def test_tool_call_deltas_join_by_index() -> None:
    capture = ChatCapture(max_bytes=1000)
    deltas = [
        {"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "g", "arguments": ""}}]},
        {
            "tool_calls": [
                {"index": 0, "id": "call_a", "function": {"name": "f", "arguments": '{"a"'}}
            ]
        },
        {"tool_calls": [{"index": 0, "id": "call_a", "function": {"arguments": ":1}"}}]},
        {"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]},
    ]
    for delta in deltas:
        capture.feed_chunk({"choices": [{"index": 0, "delta": delta}]})
    (turn,) = capture.turns()
    assert turn.tool_calls == (
        SentToolCall("call_a", "f", '{"a":1}'),
        SentToolCall("call_b", "g", "{}"),
    )


def exhausted(capture: ChatCapture) -> bool:
    """Read through a call: mypy would keep the attribute narrowed across ``feed_chunk``."""
    return capture.exhausted


def test_over_the_byte_limit_nothing_is_kept() -> None:
    capture = ChatCapture(max_bytes=10)
    capture.feed_chunk({"choices": [{"index": 0, "delta": {"reasoning_content": "ééééé"}}]})
    assert not exhausted(capture)  # 10 bytes: at the limit
    capture.feed_chunk({"choices": [{"index": 0, "delta": {"content": "x"}}]})
    assert exhausted(capture)
    assert capture.turns() == []
    capture.feed_chunk({"choices": [{"index": 0, "delta": {"content": "more"}}]})
    assert capture.turns() == []
