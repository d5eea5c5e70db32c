"""What a direct Responses API client got from the relay's ``POST /v1/responses``.

The passthrough answers with Responses SSE (``event: <type>`` + ``data: <json>`` frames)
or, for a non-streaming call, the final ``response`` object. :func:`parse_responses_answer`
reads either from the raw body and lists every way it is not a valid Responses answer in
:attr:`ResponsesAnswer.problems`; :func:`compare_with_upstream` adds the ways it differs
from what the upstream really sent (a passthrough must forward the events unchanged).
The official ``openai`` SDK's models validate each event and the final object when the
SDK is installed (the ``test`` extra); the structural checks here run regardless.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from relay.core.responses_events import TERMINAL_EVENTS
from scenarios.answer import ChatAnswer


@dataclass
class ResponsesAnswer(ChatAnswer):
    """A :class:`ChatAnswer` (status, error, text, request id) of a Responses call.

    ``outcome``: ``success`` (a valid answer ending ``completed``), ``incomplete``,
    ``error`` (HTTP error, ``error`` event, ``response.failed``), ``cut`` (no terminal
    event) or ``malformed`` (``problems`` says why).
    """

    events: list[dict[str, Any]] = field(default_factory=list)  # data of each SSE event
    response: dict[str, Any] | None = None  # the final response object
    problems: list[str] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        if self.status is None:
            return "cut"
        if self.status >= 400 or self.error is not None:
            return "error"
        if self.problems:
            return "malformed"
        if self.response is None:
            return "cut"
        status = self.response.get("status")
        return {"completed": "success", "incomplete": "incomplete"}.get(str(status), "error")

    def summary(self) -> dict[str, Any]:
        return {
            **super().summary(),
            "endpoint": "responses",
            "events": len(self.events),
            "problems": self.problems,
        }


def parse_responses_answer(
    status: int | None, headers: dict[str, str], body: bytes, *, stream: bool
) -> ResponsesAnswer:
    answer = ResponsesAnswer(status=status, request_id=headers.get("x-request-id"))
    if status is None:
        return answer
    is_sse = headers.get("content-type", "").startswith("text/event-stream")
    if status >= 400:
        answer.set_json_body(body)
        answer.error = answer.error or {"message": f"HTTP {status} without an error envelope"}
        return answer
    if is_sse != stream:
        answer.problems.append(f"asked stream={stream}, got {headers.get('content-type')!r}")
    if is_sse:
        _parse_stream(answer, body)
    else:
        _parse_object(answer, body)
    if answer.response is not None:
        answer.text = _output_text(answer.response)
    _validate_with_sdk(answer)
    return answer


def _parse_stream(answer: ResponsesAnswer, body: bytes) -> None:
    text = body.decode("utf-8", "replace")
    frames = text.split("\n\n")
    if frames and frames[-1].strip():
        answer.problems.append("the stream ended inside a frame")
    for frame in frames[:-1]:
        lines = [line for line in frame.split("\n") if line and not line.startswith(":")]
        if not lines:
            answer.comments += 1  # a keepalive comment
            continue
        names = [line[6:].strip() for line in lines if line.startswith("event:")]
        data = "\n".join(line[5:].removeprefix(" ") for line in lines if line.startswith("data:"))
        try:
            event = json.loads(data)
        except ValueError:
            answer.problems.append(f"event {len(answer.events)}: data is not JSON")
            continue
        if not isinstance(event, dict) or names != [event.get("type")]:
            answer.problems.append(f"event {len(answer.events)}: event: {names} != data.type")
            continue
        if answer.response is not None or answer.error is not None:
            answer.problems.append(f"event {len(answer.events)} follows the terminal event")
        answer.events.append(event)
        if event["type"] == "error":
            answer.error = {k: event.get(k) for k in ("message", "code", "param")}
        elif event["type"] in TERMINAL_EVENTS and isinstance(event.get("response"), dict):
            answer.response = event["response"]
    if answer.events and answer.events[0].get("type") != "response.created":
        answer.problems.append(f"the first event is {answer.events[0].get('type')!r}")
    numbers = [e.get("sequence_number") for e in answer.events]
    counted = [n for n in numbers if isinstance(n, int)]
    if len(counted) == len(numbers) and counted != sorted(set(counted)):
        answer.problems.append("sequence_number does not increase")


def _parse_object(answer: ResponsesAnswer, body: bytes) -> None:
    try:
        value = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        answer.problems.append("the body is not JSON")
        return
    if not isinstance(value, dict) or value.get("object") != "response":
        answer.problems.append("the body is not a response object")
        return
    answer.json_body = value
    answer.response = value


def _output_text(response: dict[str, Any]) -> str:
    parts = []
    for item in response.get("output") or []:
        if isinstance(item, dict) and item.get("type") == "message":
            for part in item.get("content") or []:
                if isinstance(part, dict) and part.get("type") == "output_text":
                    parts.append(str(part.get("text", "")))
    return "".join(parts)


def _validate_with_sdk(answer: ResponsesAnswer) -> None:
    try:  # imported late: optional, and slow to import for runs that never need it
        from openai.types.responses import Response, ResponseStreamEvent  # noqa: PLC0415
        from pydantic import TypeAdapter, ValidationError  # noqa: PLC0415
    except ImportError:  # the SDK is a test extra; the structural checks above still ran
        return
    events: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
    try:
        for event in answer.events:
            events.validate_python(event, strict=True)
        if answer.response is not None:
            Response.model_validate(answer.response, strict=True)
    except ValidationError as failure:
        answer.problems.append(f"openai SDK: {str(failure).splitlines()[0]}")


def compare_with_upstream(answer: ResponsesAnswer, sent: list[Any], stream: bool) -> None:
    """Add a problem unless the answer forwards exactly what the upstream ``sent`` (its
    events, in order; for JSON the terminal event's response object)."""
    if stream:
        if answer.events != sent:
            first = next(
                (i for i, (a, b) in enumerate(zip(answer.events, sent, strict=False)) if a != b),
                min(len(answer.events), len(sent)),
            )
            answer.problems.append(
                f"the events differ from the upstream's from event {first} "
                f"({len(answer.events)} forwarded, {len(sent)} sent)"
            )
        return
    final = next(
        (
            e.get("response")
            for e in sent
            if isinstance(e, dict) and e.get("type") in TERMINAL_EVENTS
        ),
        None,
    )
    if answer.response != final:
        answer.problems.append("the response object differs from the upstream's final response")
