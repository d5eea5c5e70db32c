"""relay.pipeline.provider as transcripts: a Chat provider's answer forwarded, its
reasoning recorded before the client can see the end."""

from __future__ import annotations

from typing import Any

from relay.errors import UpstreamHTTPError
from relay.pipeline.actions import (
    Fail,
    Finish,
    Flush,
    Log,
    Queue,
    Record,
    Respond,
    SendUpstream,
    StartDelivery,
    StartStream,
)
from relay.pipeline.provider import ChatProviderPipeline
from relay.strict.chat_capture import ChatCapture
from relay.translate.chat_sse import DONE, encode_chunk, encode_error

BODY = {"model": "deepseek-reasoner", "messages": [{"role": "user", "content": "hi"}]}


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c1", "object": "chat.completion.chunk", "created": 1,
            "model": "deepseek-reasoner",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip


def provider(stream: bool, capture: ChatCapture | None = None) -> ChatProviderPipeline:
    return ChatProviderPipeline(dict(BODY), request_id="req_1", client_model="ds",
                                stream=stream, capture=capture)  # fmt: skip


def test_a_stream_is_recorded_before_done() -> None:
    capture = ChatCapture(max_bytes=1 << 20)
    p = provider(stream=True, capture=capture)
    assert p.start() == [SendUpstream(BODY, buffered=False)]
    first = chunk({"role": "assistant", "reasoning_content": "think"})
    assert p.upstream_event("chunk", first) == [StartStream(), Queue(encode_chunk(first))]
    assert first["model"] == "ds"  # the client's name for the model is echoed
    last = chunk({"content": "hello"}, finish="stop")
    assert p.upstream_event("chunk", last) == [Queue(encode_chunk(last))]
    assert p.batch_done() == [Flush()]
    assert p.upstream_done() == [
        Record(),  # before [DONE]
        StartDelivery(),
        Queue(DONE),
        Flush(),
        Log("chat_done", {"request_id": "req_1", "finish": "stop"}),
        Finish(),
    ]
    [turn] = capture.turns()
    assert (turn.reasoning, turn.content) == ("think", "hello")


def test_a_json_answer_is_recorded_before_it_is_sent() -> None:
    capture = ChatCapture(max_bytes=1 << 20)
    p = provider(stream=False, capture=capture)
    assert p.start() == [SendUpstream(BODY, buffered=True)]
    completion = {"id": "c1", "object": "chat.completion", "created": 1,
                  "model": "deepseek-reasoner",
                  "choices": [{"index": 0, "finish_reason": "tool_calls",
                               "message": {"role": "assistant", "content": None,
                                           "reasoning_content": "plan"}}]}  # fmt: skip
    assert p.upstream_event("completion", completion) == []
    assert p.upstream_done() == [Record(), Respond({**completion, "model": "ds"})]
    assert p.responded() == [Finish(), Log("chat_done", {"request_id": "req_1",
                                                         "finish": "tool_calls"})]  # fmt: skip
    assert [t.reasoning for t in capture.turns()] == ["plan"]


def test_a_provider_error_keeps_its_status_and_envelope() -> None:
    error = UpstreamHTTPError(400, {"error": {"message": "The reasoning_content in the thinking "
                                              "mode must be passed back to the API.",
                                              "type": "invalid_request_error"}})  # fmt: skip
    streamed = provider(stream=True)
    streamed.start()
    assert streamed.failed(error) == [Fail(error, encode_error(error.envelope()))]
    whole = provider(stream=False)
    whole.start()
    assert whole.failed(error) == [Fail(error, None)]


def test_nothing_is_recorded_for_a_client_that_left() -> None:
    p = provider(stream=True)
    p.start()
    p.upstream_event("chunk", chunk({"content": "x"}))
    assert p.client_gone(1) == [Log("client_disconnected", {"request_id": "req_1", "frames": 1})]
    assert p.upstream_done() == []
