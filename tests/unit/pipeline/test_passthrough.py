"""relay.pipeline.passthrough as transcripts: POST /v1/responses forwarded as sent."""

from __future__ import annotations

from typing import Any

import pytest

from relay.errors import StoreFull, UpstreamError, UpstreamFailed, UpstreamProtocolError
from relay.pipeline.actions import (
    Action,
    Begin,
    Fail,
    Fence,
    Finish,
    Flush,
    Log,
    Poison,
    Queue,
    Respond,
    SendUpstream,
    StartStream,
    Stop,
)
from relay.pipeline.base import Phase, PipelineStateError
from relay.pipeline.passthrough import ResponsesPassthrough
from relay.translate.responses_sse import encode_event

BODY = {"model": "gpt-5", "input": "hi"}
RESPONSE = {"id": "resp_1", "object": "response", "status": "completed", "output": []}
CREATED = ("response.created", {"type": "response.created", "response": RESPONSE})
DELTA = ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "x"})
COMPLETED = ("response.completed", {"type": "response.completed", "response": RESPONSE})
ERROR = ("error", {"type": "error", "message": "overloaded", "code": "server_error"})


def passthrough(stream: bool) -> ResponsesPassthrough:
    return ResponsesPassthrough(dict(BODY), request_id="req_1", stream=stream)


def sent(stream: bool) -> list[Action]:
    """What forwarding the call asks for: its log line, then the send."""
    log = Log("responses_passthrough", {"request_id": "req_1", "model": "gpt-5",
                                        "stream": stream})  # fmt: skip
    return [log, SendUpstream(BODY, buffered=not stream)]


def forwarding(stream: bool) -> ResponsesPassthrough:
    """A passthrough the cache let through unfenced, its body on the way upstream."""
    p = passthrough(stream)
    assert p.start() == [Begin()]
    assert p.began(None, None) == sent(stream)
    return p


# --- the cache's rule: the fence before anything is forwarded -------------------------------


@pytest.mark.parametrize("stream", [True, False])
def test_the_fence_is_durable_before_the_body_is_sent(stream: bool) -> None:
    p = passthrough(stream)
    assert p.start() == [Begin()]  # the cache's decision comes first
    assert p.began(None, Fence()) == [Fence()]  # its fence, and nothing after it
    guarding = p.phase
    assert p.guarded() == sent(stream)  # only once the fence is written
    assert (guarding, p.phase) == (Phase.GUARDING, Phase.UPSTREAM)


@pytest.mark.parametrize("stream", [True, False])
def test_a_fence_that_failed_forwards_nothing_and_fails_with_its_status(stream: bool) -> None:
    p = passthrough(stream)
    p.start()
    p.began(None, Fence())
    error = StoreFull("the fence could not be written (SQLITE_FULL)")
    [fail] = p.failed(error)
    # Fail: the shell raises it for the handler to answer (nothing reached the client), so
    # a stream's frame is never sent; nothing is forwarded, and every later input is moot.
    assert isinstance(fail, Fail) and fail.error is error
    assert p.phase is Phase.DONE
    with pytest.raises(PipelineStateError, match="expected guarding"):
        p.guarded()  # a fence that failed is never answered as written
    assert p.upstream_done() == [] and p.failed(error) == []


@pytest.mark.parametrize("stream", [True, False])
def test_without_a_guard_to_write_the_body_goes_upstream_at_once(stream: bool) -> None:
    # The cache off with nothing to protect (no store, or its gap recorded): no Fence.
    p = passthrough(stream)
    p.start()
    actions = p.began(None, None)
    assert actions == sent(stream)
    assert not any(isinstance(a, Fence | Poison) for a in actions)
    with pytest.raises(PipelineStateError, match="expected guarding"):
        p.guarded()


@pytest.mark.parametrize(("capture_bytes", "guard"), [(4096, None), (None, Poison())])
def test_a_decision_only_an_observed_chat_request_gets_is_a_bug(
    capture_bytes: int | None, guard: Poison | None
) -> None:
    p = passthrough(stream=True)
    p.start()
    with pytest.raises(PipelineStateError, match="never observed"):
        p.began(capture_bytes, guard)


def test_nothing_is_forwarded_before_the_cache_s_decision() -> None:
    p = passthrough(stream=True)
    with pytest.raises(PipelineStateError, match="in phase new"):
        p.began(None, None)
    p.start()
    with pytest.raises(PipelineStateError, match="in phase beginning"):
        p.upstream_event(*CREATED)


# --- forwarding -----------------------------------------------------------------------------


def test_a_stream_is_forwarded_event_by_event() -> None:
    p = forwarding(stream=True)
    assert p.upstream_event(*CREATED) == [StartStream(), Queue(encode_event(*CREATED))]
    assert p.upstream_event(*DELTA) == [Queue(encode_event(*DELTA))]
    assert p.batch_done() == [Flush()]
    assert p.upstream_event(*COMPLETED) == [Queue(encode_event(*COMPLETED))]
    assert p.upstream_done() == [Flush(), Finish()]
    assert p.phase is Phase.DONE


def test_an_error_event_is_forwarded_then_ends_the_exchange() -> None:
    p = forwarding(stream=True)
    p.upstream_event(*CREATED)
    actions = p.upstream_event(*ERROR)
    assert actions[:2] == [Queue(encode_event(*ERROR)), Flush()]
    stop = actions[2]
    assert isinstance(stop, Stop) and isinstance(stop.error, UpstreamFailed)
    assert stop.error.message == "overloaded"
    # Its failure is already in the stream: no second error frame.
    assert p.failed(stop.error) == [Fail(stop.error)]


def test_a_broken_stream_gets_one_error_event() -> None:
    p = forwarding(stream=True)
    p.upstream_event(*CREATED)
    cut = UpstreamError("the upstream connection closed mid-stream")
    assert p.failed(cut) == [Fail(cut, encode_event("error", cut.envelope()["error"]))]
    assert p.failed(cut) == [] and p.client_gone(1) == []


def test_a_json_call_answers_with_the_final_response() -> None:
    p = forwarding(stream=False)
    assert p.upstream_event(*CREATED) == []
    assert p.upstream_event(*COMPLETED) == []
    assert p.batch_done() == []
    assert p.upstream_done() == [Respond(RESPONSE)]
    assert p.responded() == [Finish()]


def test_a_json_call_without_a_final_response_fails() -> None:
    p = forwarding(stream=False)
    p.upstream_event(*CREATED)
    [fail] = p.upstream_done()
    assert isinstance(fail, Fail) and isinstance(fail.error, UpstreamProtocolError)
    assert fail.frame is None


def test_a_json_error_event_stops_the_exchange() -> None:
    p = forwarding(stream=False)
    [stop] = p.upstream_event(*ERROR)
    assert isinstance(stop, Stop)
    assert p.failed(stop.error) == [Fail(stop.error)]


# Events the relay reads but cannot (damaged), does not read, or reads loosely: the
# passthrough decides nothing from their fields and forwards the payload it got.
AS_THEY_CAME = [
    ("response.output_text.delta", {"type": "response.output_text.delta", "delta": 5}),
    ("response.output_item.done", {"type": "response.output_item.done", "item": "x"}),
    ("response.completed", {"type": "response.completed", "response": ["not", "a", "dict"]}),
    ("response.audio.delta", {"type": "response.audio.delta", "delta": "AAAA", "extra": [1]}),
    ("response.in_progress", {"type": "response.in_progress"}),
]


@pytest.mark.parametrize("event", AS_THEY_CAME)
def test_any_event_is_forwarded_as_it_came(event: tuple[str, dict[str, Any]]) -> None:
    p = forwarding(stream=True)
    p.upstream_event(*CREATED)
    assert p.upstream_event(*event) == [Queue(encode_event(*event))]


@pytest.mark.parametrize(
    ("terminal", "final"),
    [(COMPLETED, RESPONSE),
     (("response.incomplete", {"response": {"status": "incomplete"}}), {"status": "incomplete"}),
     (("response.failed", {"response": {"status": "failed"}}), {"status": "failed"}),
     (("response.failed", {"response": "junk"}), None),
     (("response.completed", {"response": []}), None)],
)  # fmt: skip
def test_a_json_call_takes_its_answer_from_a_terminal_event_holding_a_response(
    terminal: tuple[str, dict[str, Any]], final: dict[str, Any] | None
) -> None:
    p = forwarding(stream=False)
    assert p.upstream_event(*terminal) == []
    [answer] = p.upstream_done()
    if final is None:
        assert isinstance(answer, Fail) and isinstance(answer.error, UpstreamProtocolError)
    else:
        assert answer == Respond(final)


def test_a_client_that_left() -> None:
    p = forwarding(stream=True)
    assert p.client_gone(3) == [Log("client_disconnected", {"request_id": "req_1", "frames": 3})]
    assert p.upstream_done() == []  # nothing more goes out


@pytest.mark.parametrize(
    "misuse",
    [lambda p: p.committed(), lambda p: p.dispatched({}), lambda p: p.refusal(None, None)],
)
def test_inputs_it_never_takes(misuse: Any) -> None:
    p = forwarding(stream=True)
    with pytest.raises(PipelineStateError, match="takes no"):
        misuse(p)
