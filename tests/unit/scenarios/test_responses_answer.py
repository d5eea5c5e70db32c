"""scenarios.responses_answer: what a direct Responses client got through the relay's
passthrough. Real fake-upstream answers parse as valid (strict SDK validation included);
each way of breaking one is reported, and so is any difference from what the upstream
sent."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from fakeupstream.fake import FakeUpstream
from fakeupstream.scripts import parse_script
from scenarios.responses_answer import compare_with_upstream, parse_responses_answer

SSE = {"content-type": "text/event-stream; charset=utf-8", "x-request-id": "req_1"}
JSON = {"content-type": "application/json"}
SCRIPT = {"output": [{"type": "reasoning", "summary": ["r"]}, {"type": "message", "text": "Hi!"}]}


def upstream(stream: bool) -> tuple[bytes, list[dict[str, Any]]]:
    """The fake's own answer: raw body bytes and the events it sent."""
    fake = FakeUpstream(seed=3, secret=b"s" * 32)
    body = {"model": "gpt-5", "input": "hello", "stream": stream}
    answer = fake.answer(body, "sk-test", parse_script(SCRIPT))[0]
    if stream:
        return b"".join(answer.frames), list(answer.parsed)
    raw = b"".join(answer.frames)
    return raw, [{"type": "response.completed", "response": json.loads(raw)}]


@pytest.mark.parametrize("stream", [True, False])
def test_a_faithful_answer_is_a_success(stream: bool) -> None:
    raw, sent = upstream(stream)
    answer = parse_responses_answer(200, SSE if stream else JSON, raw, stream=stream)
    compare_with_upstream(answer, sent, stream)
    assert answer.problems == []
    assert answer.outcome == "success"
    assert answer.text == "Hi!"
    assert answer.summary()["endpoint"] == "responses"


def frames_of(raw: bytes) -> list[str]:
    return raw.decode().split("\n\n")[:-1]


def join(frames: list[str]) -> bytes:
    return "".join(f + "\n\n" for f in frames).encode()


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (lambda f: [f[0].replace("event: response.created", "event: x"), *f[1:]], "!= data.type"),
        (lambda f: [f[0].replace("data: {", "data: {{"), *f[1:]], "not JSON"),
        (lambda f: [*f, f[-1]], "follows the terminal event"),
        (lambda f: f[1:], "the first event is"),
        (lambda f: [f[0], f[2], f[1], *f[3:]], "sequence_number"),
    ],
)
def test_a_broken_stream_is_malformed(mutate: Any, problem: str) -> None:
    raw, _ = upstream(True)
    answer = parse_responses_answer(200, SSE, join(mutate(frames_of(raw))), stream=True)
    assert answer.outcome == "malformed"
    assert any(problem in p for p in answer.problems), answer.problems


def test_a_stream_cut_inside_a_frame_or_before_the_end() -> None:
    raw, _ = upstream(True)
    inside = parse_responses_answer(200, SSE, raw[:-40], stream=True)
    assert inside.outcome == "malformed"
    assert "the stream ended inside a frame" in inside.problems
    early = parse_responses_answer(200, SSE, join(frames_of(raw)[:-1]), stream=True)
    assert early.outcome == "cut"


def test_the_sdk_judges_event_shapes() -> None:
    raw, _ = upstream(True)
    frames = frames_of(raw)
    event = json.loads(frames[-1].split("data: ", 1)[1])
    event["response"]["output"] = "not a list"
    frames[-1] = f"event: {event['type']}\ndata: {json.dumps(event)}"
    answer = parse_responses_answer(200, SSE, join(frames), stream=True)
    assert any(p.startswith("openai SDK:") for p in answer.problems), answer.problems


@pytest.mark.parametrize("stream", [True, False])
def test_any_difference_from_the_upstream_is_reported(stream: bool) -> None:
    raw, sent = upstream(stream)
    answer = parse_responses_answer(200, SSE if stream else JSON, raw, stream=stream)
    other = copy.deepcopy(sent)
    if stream:
        del other[3]  # the relay would have dropped an event
    else:
        other[0]["response"]["id"] = "resp_other"
    compare_with_upstream(answer, other, stream)
    assert answer.outcome == "malformed"
    assert answer.problems and "upstream" in answer.problems[0]


def test_the_wrong_mode_and_errors() -> None:
    raw, _ = upstream(False)
    assert "asked stream=True" in parse_responses_answer(200, JSON, raw, stream=True).problems[0]
    envelope = {"error": {"message": "full", "type": "server_error", "code": "cache_unavailable"}}
    refused = parse_responses_answer(503, JSON, json.dumps(envelope).encode(), stream=True)
    assert (refused.outcome, refused.status) == ("error", 503)
    assert refused.error is not None and refused.error["code"] == "cache_unavailable"
    assert parse_responses_answer(None, {}, b"", stream=True).outcome == "cut"
