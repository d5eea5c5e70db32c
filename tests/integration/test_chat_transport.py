"""The Chat dialects of relay.transport.upstream through the relay: the foundation's guards
(idle timer, size limits, content types, protocol errors) hold for Chat providers too."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from relay.errors import UpstreamProtocolError, UpstreamReportedError
from relay.transport.sse import SSEEvent, decode_chat_event
from tests.support.stack import Stack, running_stack

MODEL = "deepseek/deepseek-chat"


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    env = {"RELAY_IDLE_TIMEOUT_MS": "300", "RELAY_MAX_RESPONSE_BYTES": "4096"}
    with running_stack(tmp_path / "data", env, providers={"deepseek": {"kind": "chat"}}) as s:
        yield s


def post(stack: Stack, *, stream: bool) -> requests.Response:
    body: dict[str, Any] = {
        "model": MODEL,
        "stream": stream,
        "messages": [{"role": "user", "content": "hi"}],
    }
    return requests.post(
        stack.base_url + "/chat/completions", headers=stack.headers(), json=body, timeout=10
    )


def error_of(answer: requests.Response) -> dict[str, Any]:
    if answer.headers["Content-Type"].startswith("text/event-stream"):
        frames = [f for f in answer.text.split("\n\n") if f]
        assert "data: [DONE]" not in frames
        streamed: dict[str, Any] = json.loads(frames[-1].removeprefix("data: "))["error"]
        return streamed
    error: dict[str, Any] = answer.json()["error"]
    return error


def test_a_json_answer_over_the_response_limit(stack: Stack) -> None:
    stack.script({"output": [{"type": "message", "text": "x" * 5000}]})
    answer = post(stack, stream=False)
    assert answer.status_code == 502
    assert "RELAY_MAX_RESPONSE_BYTES (4096 bytes)" in answer.json()["error"]["message"]


def test_a_silent_provider_is_abandoned(stack: Stack) -> None:
    stack.script({"toxics": {"hang_after_events": 0}})
    answer = post(stack, stream=False)
    assert answer.status_code == 504
    assert answer.json()["error"]["code"] == "upstream_timeout"


def test_a_stream_going_silent_ends_with_an_error_frame(stack: Stack) -> None:
    stack.script({"toxics": {"hang_after_events": 2}})
    answer = post(stack, stream=True)
    assert answer.status_code == 200
    assert error_of(answer)["code"] == "upstream_timeout"


def test_an_event_stream_where_json_was_asked(stack: Stack) -> None:
    stack.script({"raw_sse": 'data: {"choices": []}\n\ndata: [DONE]\n\n'})
    answer = post(stack, stream=False)
    assert answer.status_code == 502
    assert "where a JSON answer (application/json) was requested" in error_of(answer)["message"]


def test_a_malformed_chunk_is_a_protocol_error(stack: Stack) -> None:
    stack.script({"toxics": {"malformed_at_event": 2, "latency_ms": 20}})
    answer = post(stack, stream=True)
    error = error_of(answer)
    assert error["code"] == "upstream_protocol_error"
    assert error["message"] == "upstream SSE event data is not valid JSON"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ("[DONE]", None),
        ('{"id": "x", "choices": []}', {"id": "x", "choices": []}),
        ('{"error": {"message": "m"}}', {"error": {"message": "m"}}),
    ],
)
def test_decode_chat_event(data: str, expected: Any) -> None:
    # Chat streams carry no type: an ``event:`` line, when present, is not checked.
    assert decode_chat_event(SSEEvent("anything", data)) == expected


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1]", "not a JSON object"),
        ('{"x": NaN}', "holds NaN"),
        ("[" * 100_000, "not valid JSON"),
    ],
)
def test_decode_chat_event_refuses(data: str, message: str) -> None:
    with pytest.raises(UpstreamProtocolError, match=message):
        decode_chat_event(SSEEvent(None, data))


def test_a_reported_error_keeps_the_providers_envelope() -> None:
    envelope = {"error": {"message": "busy", "type": "overloaded", "param": None, "code": "x"}}
    err = UpstreamReportedError(envelope)
    assert (err.status, err.message, err.code, err.envelope()) == (502, "busy", "x", envelope)
    bare = UpstreamReportedError({"error": "rate limited"})
    assert bare.envelope() == {
        "error": {"message": "rate limited", "type": "upstream_error", "param": None, "code": None}
    }
    assert UpstreamReportedError({"error": None}).message == "the upstream reported an error"
