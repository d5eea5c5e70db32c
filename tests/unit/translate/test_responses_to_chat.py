"""relay.translate.responses_to_chat: final Response JSON → chat.completion."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.chat import ChatCompletion

from relay.errors import UpstreamFailed, UpstreamProtocolError
from relay.translate.events import ChatCompletion as ChatCompletionDict
from relay.translate.events import ChatMessage
from relay.translate.responses_to_chat import (
    response_to_chat_completion,
    sanitize_upstream_text,
    usage_to_chat,
)

USAGE = {
    "input_tokens": 100,
    "input_tokens_details": {"cached_tokens": 40},
    "output_tokens": 30,
    "output_tokens_details": {"reasoning_tokens": 20},
    "total_tokens": 130,
}
CHAT_USAGE = {
    "prompt_tokens": 100,
    "completion_tokens": 30,
    "total_tokens": 130,
    "prompt_tokens_details": {"cached_tokens": 40},
    "completion_tokens_details": {"reasoning_tokens": 20},
}


def msg(*parts: dict[str, Any], item_id: str = "msg_1") -> dict[str, Any]:
    return {"id": item_id, "type": "message", "status": "completed", "role": "assistant",
            "content": list(parts)}  # fmt: skip


def text(value: str) -> dict[str, Any]:
    return {"type": "output_text", "text": value, "annotations": [], "logprobs": []}


def refusal(value: str) -> dict[str, Any]:
    return {"type": "refusal", "refusal": value}


def call(call_id: str, name: str = "f", arguments: str = "{}") -> dict[str, Any]:
    return {"id": "fc_" + call_id, "type": "function_call", "status": "completed",
            "call_id": call_id, "name": name, "arguments": arguments}  # fmt: skip


def reasoning(*summaries: str) -> dict[str, Any]:
    return {"id": "rs_1", "type": "reasoning",
            "summary": [{"type": "summary_text", "text": s} for s in summaries],
            "encrypted_content": "gAAAAABsecret"}  # fmt: skip


def response(*output: dict[str, Any], status: str = "completed", **extra: Any) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "created_at": 1, "status": status,
            "model": "gpt-5", "output": list(output), "usage": USAGE, **extra}  # fmt: skip


def convert(resp: dict[str, Any], *, summaries: bool = False) -> ChatCompletionDict:
    completion = response_to_chat_completion(
        resp, completion_id="chatcmpl-1", created=1700, model="client-model",
        reasoning_summaries=summaries,
    )  # fmt: skip
    ChatCompletion.model_validate(completion, strict=True)
    return completion


def only_choice(completion: ChatCompletionDict) -> tuple[ChatMessage, str]:
    (choice,) = completion["choices"]
    return choice["message"], choice["finish_reason"]


def test_plain_answer_exactly() -> None:
    assert convert(response(reasoning("thinking"), msg(text("Hello")))) == {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700,
        "model": "client-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello", "refusal": None},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": CHAT_USAGE,
    }


@pytest.mark.parametrize(
    ("output", "expected_message", "finish"),
    [
        # several message items (preamble + answer) → one choice, concatenated in order
        ([msg(text("I'll check. ")), msg(text("Done."), item_id="msg_2")],
         {"content": "I'll check. Done.", "refusal": None}, "stop"),
        ([msg(text("a"), text("b"))], {"content": "ab", "refusal": None}, "stop"),
        ([msg(refusal("I can't help."))], {"content": None, "refusal": "I can't help."}, "stop"),
        ([msg(text("Partly. "), refusal("No more."))],
         {"content": "Partly. ", "refusal": "No more."}, "stop"),
        ([], {"content": "", "refusal": None}, "stop"),
        ([reasoning()], {"content": "", "refusal": None}, "stop"),
        ([call("call_1", "read", '{"path": "a"}'), call("call_2", "ls", "{not json")],
         {"content": None, "refusal": None, "tool_calls": [
             {"id": "call_1", "type": "function",
              "function": {"name": "read", "arguments": '{"path": "a"}'}},
             {"id": "call_2", "type": "function",
              "function": {"name": "ls", "arguments": "{not json"}}]},
         "tool_calls"),
        ([msg(text("Let me look.")), call("call_1")],
         {"content": "Let me look.", "refusal": None, "tool_calls": [
             {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
         "tool_calls"),
        # item and part types with no Chat form are left out
        ([{"id": "ws_1", "type": "web_search_call", "status": "completed"},
          msg({"type": "output_audio", "data": "x"}, text("ok"))],
         {"content": "ok", "refusal": None}, "stop"),
    ],
)  # fmt: skip
def test_output_items(output: list[Any], expected_message: dict[str, Any], finish: str) -> None:
    message, finish_reason = only_choice(convert(response(*output)))
    assert message == {"role": "assistant", **expected_message}
    assert finish_reason == finish


@pytest.mark.parametrize(
    ("output", "summaries", "expected"),
    [
        ([reasoning("First.", "Second."), msg(text("x"))], True, "First.\n\nSecond."),
        ([reasoning("First."), msg(text("x"))], False, None),
        ([reasoning(), msg(text("x"))], True, None),
        ([msg(text("x"))], True, None),
    ],
)
def test_reasoning_summaries(output: list[Any], summaries: bool, expected: str | None) -> None:
    message, _ = only_choice(convert(response(*output), summaries=summaries))
    assert message.get("reasoning_content") == expected
    assert "gAAAA" not in str(message)


@pytest.mark.parametrize(
    ("details", "finish"),
    [({"reason": "max_output_tokens"}, "length"), ({"reason": "content_filter"}, "content_filter")],
)
def test_incomplete(details: dict[str, Any], finish: str) -> None:
    resp = response(msg(text("Trunc")), call("c"), status="incomplete", incomplete_details=details)
    message, finish_reason = only_choice(convert(resp))
    assert message["content"] == "Trunc"
    assert finish_reason == finish


@pytest.mark.parametrize("details", [None, {}, {"reason": "something_new"}])
def test_incomplete_without_known_reason_fails(details: Any) -> None:
    with pytest.raises(UpstreamFailed, match="incomplete"):
        convert(response(msg(text("x")), status="incomplete", incomplete_details=details))


def test_failed_response_raises_with_sanitized_message_and_code() -> None:
    error = {
        "code": "server_error",
        "message": "The encrypted content gAAAAABoQx9Zk3kJfL0pQ2rStUvWxYz could not be "
        "verified for item rs_68ca4dc243a8819782280eaebd5746cb06307efc4164ff1d.",
    }
    with pytest.raises(UpstreamFailed) as info:
        convert(response(status="failed", error=error))  # fmt: skip
    assert info.value.code == "server_error"
    assert info.value.status == 502
    assert "gAAAA" not in info.value.message
    assert "<redacted>" in info.value.message
    assert "rs_68ca4dc243a8819782280eaebd5746cb06307efc4164ff1d" in info.value.message


@pytest.mark.parametrize(
    ("error", "code", "message_part"),
    [
        (None, "upstream_failed", "upstream response failed"),
        ({"code": "Bad Code!", "message": "boom"}, "upstream_failed", "boom"),
        ({"code": "rate_limit_exceeded", "message": ""}, "rate_limit_exceeded", "failed"),
    ],
)
def test_failed_response_variants(error: Any, code: str, message_part: str) -> None:
    with pytest.raises(UpstreamFailed) as info:
        convert(response(status="failed", error=error))
    assert info.value.code == code
    assert message_part in info.value.message


@pytest.mark.parametrize("status", ["cancelled", "in_progress", "queued", "weird"])
def test_other_statuses_fail(status: str) -> None:
    with pytest.raises(UpstreamFailed, match=status):
        convert(response(msg(text("x")), status=status))


@pytest.mark.parametrize(
    "resp",
    [
        {"output": []},
        {"status": "completed"},
        {"status": "completed", "output": {}},
        {"status": "completed", "output": ["x"]},
        {"status": "completed", "output": [{"id": "x"}]},
        {"status": "completed", "output": [{"type": "message", "content": "hi"}]},
        {"status": "completed",
         "output": [{"type": "message", "content": [{"type": "output_text"}]}]},
        {"status": "completed",
         "output": [{"type": "function_call", "name": "f", "arguments": ""}]},
        {"status": "completed", "output": [{"type": "function_call", "call_id": "c", "name": "f"}]},
        {"status": "completed", "output": [{"type": "reasoning", "summary": "x"}]},
        {"status": "completed", "output": [], "usage": {"input_tokens": 1}},
        {"status": "completed", "output": [], "usage": []},
    ],
)  # fmt: skip
def test_malformed_responses(resp: dict[str, Any]) -> None:
    with pytest.raises(UpstreamProtocolError):
        convert(resp)


def test_not_an_object() -> None:
    with pytest.raises(UpstreamProtocolError):
        response_to_chat_completion([], completion_id="c", created=1, model="m",  # type: ignore[arg-type]
                                    reasoning_summaries=False)  # fmt: skip


def test_no_usage_means_no_usage_key() -> None:
    resp = response(msg(text("x")))
    del resp["usage"]
    assert "usage" not in convert(resp)


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (None, None),
        (USAGE, CHAT_USAGE),
        ({"input_tokens": 5, "output_tokens": 7},
         {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12,
          "prompt_tokens_details": {"cached_tokens": 0},
          "completion_tokens_details": {"reasoning_tokens": 0}}),
        ({"input_tokens": 5, "output_tokens": 7, "total_tokens": 12,
          "input_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 3},
          "output_tokens_details": {"reasoning_tokens": None}},
         {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12,
          "prompt_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 3},
          "completion_tokens_details": {"reasoning_tokens": 0}}),
    ],
)  # fmt: skip
def test_usage_to_chat(usage: Any, expected: Any) -> None:
    assert usage_to_chat(usage) == expected


@pytest.mark.parametrize(
    "usage",
    [
        {"input_tokens": "5", "output_tokens": 1},
        {"input_tokens": -1, "output_tokens": 1},
        {"input_tokens": True, "output_tokens": 1},
        {"input_tokens": 1, "output_tokens": 1, "total_tokens": 1.5},
        {"input_tokens": 1, "output_tokens": 1, "input_tokens_details": {"cached_tokens": "x"}},
    ],
)
def test_malformed_usage(usage: dict[str, Any]) -> None:
    with pytest.raises(UpstreamProtocolError):
        usage_to_chat(usage)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("plain words stay", "plain words stay"),
        ("code invalid_encrypted_content stays", "code invalid_encrypted_content stays"),
        ("id call_4FV11dO0cANJcmBiybINeEtu stays", "id call_4FV11dO0cANJcmBiybINeEtu stays"),
        ("blob gAAAAABoQx9Zk3kJfL0pQ2rStUvWxYz. end", "blob <redacted>. end"),
        ("b64 QUJDREVGR0hJSktMTU5PUFFSU1RVVldY+/== end", "b64 <redacted> end"),
        ("x" * 2000, "x" * 1000 + "..."),
    ],
)
def test_sanitize_upstream_text(raw: str, expected: str) -> None:
    assert sanitize_upstream_text(raw) == expected
