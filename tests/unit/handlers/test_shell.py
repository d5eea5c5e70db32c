"""relay.handlers.shell: the shell performs a pipeline's actions in order and feeds each
outcome back (a client that left, a failed action, the cache's answers), and ends a
request as Fail says: raised while nothing reached the client, as a frame and the end
once the answer has begun. A scripted pipeline and recording stand-ins for the handler,
its downstream and the cache session; the shell's collaborators over HTTP are covered by
the handler tests beside this one."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest

from relay.core.planner import Plan
from relay.core.responses_events import ResponsesEvent, decode
from relay.errors import InvalidRequest, RelayError
from relay.handlers.shell import PipelineShell
from relay.pipeline.actions import (
    Abort,
    Action,
    Capture,
    Dispatch,
    Fail,
    Finish,
    Flush,
    Log,
    Queue,
    Record,
    Resolve,
    StartDelivery,
    StartStream,
)
from relay.pipeline.base import Pipeline
from relay.transport.upstream import ClientGone, Dialect


class Down:
    """The downstream stand-in: what was queued, drained and sent."""

    def __init__(self, calls: list[Any], *, gone_on_drain: bool = False) -> None:
        self.calls = calls
        self.gone_on_drain = gone_on_drain
        self.frames_sent = 3
        self.closed = False

    def queue(self, frame: bytes) -> None:
        self.calls.append(("queue", frame))

    async def drain(self) -> None:
        self.calls.append("drain")
        if self.gone_on_drain:
            self.closed = True
            raise ClientGone()

    def start_delivery(self, seconds: float) -> None:
        self.calls.append(("delivery", seconds))

    async def send(self, frame: bytes) -> None:
        self.calls.append(("send", frame))

    def stop_keepalive(self) -> None:
        self.calls.append("keepalive stopped")


@dataclass
class Handler:
    """The handler stand-in (only what the shell touches)."""

    calls: list[Any] = field(default_factory=list)
    gone_on_drain: bool = False
    _finished: bool = False
    _headers_written: bool = False
    request_id: str = "req_test"
    outcome_code: str | None = None

    def __post_init__(self) -> None:
        self.down = Down(self.calls, gone_on_drain=self.gone_on_drain)
        self.first_bytes: list[tuple[str, float]] = []
        self.runtime = SimpleNamespace(
            config=SimpleNamespace(delivery_timeout_ms=2500),
            clock=SimpleNamespace(monotonic=lambda: 12.0),
            metrics=SimpleNamespace(
                observe_first_byte=lambda path, s: self.first_bytes.append((path, s))
            ),
        )
        self.arrived_at = 10.0
        self.request = SimpleNamespace(path="/v1/chat/completions")

    def downstream(self, keepalive_frame: bytes | None = None) -> Down:
        self.calls.append(("downstream", keepalive_frame))
        return self.down

    def start_sse(self, down: Down) -> None:
        self.calls.append("sse")
        self._headers_written = True

    def finish(self) -> None:
        self.calls.append("finish")
        self._finished = True

    def set_header(self, name: str, value: str) -> None:
        self.calls.append(("header", name, value))


class Scripted(Pipeline):
    """Answers each input from a script and records the inputs it got."""

    def __init__(self, first: list[Action], **answers: list[Action]) -> None:
        self.first = first
        self.answers = answers
        self.inputs: list[Any] = []

    def start(self) -> list[Action]:
        return self.first

    def _answer(self, name: str, *args: Any) -> list[Action]:
        self.inputs.append((name, *args))
        return self.answers.get(name, [])

    def dispatched(self, body: dict[str, Any]) -> list[Action]:
        return self._answer("dispatched", body)

    def failed(self, error: RelayError) -> list[Action]:
        return self._answer("failed", error)

    def client_gone(self, frames: int) -> list[Action]:
        return self._answer("client_gone", frames)


class Session:
    def __init__(self, calls: list[Any]) -> None:
        self.calls = calls
        self.plan = Plan(unmatched=1)  # what dispatch() planned: no block, one unmatched

    def dispatch(self) -> dict[str, Any]:
        self.calls.append("dispatch")
        return {"input": []}

    def feed(self, event: ResponsesEvent) -> None:
        self.calls.append(("feed", event.type))

    def delivered(self) -> None:
        self.calls.append("delivered")

    def abort(self, reason: str) -> None:
        self.calls.append(("abort", reason))


def shell(handler: Handler, pipeline: Pipeline, *, session: Session | None = None,
          record: Any = None, keepalive: bytes | None = b": ka\n\n") -> PipelineShell:  # fmt: skip
    return PipelineShell(
        cast(Any, handler), pipeline, provider=cast(Any, SimpleNamespace(name="openai")),
        dialect=Dialect.RESPONSES, keepalive=keepalive, session=cast(Any, session),
        record=record,
    )  # fmt: skip


def test_actions_are_performed_in_order_and_the_keepalive_stopped() -> None:
    handler = Handler()
    pipeline = Scripted([StartStream(), Queue(b"a"), Queue(b"b"), Flush(), StartDelivery(),
                         Log("test_event", {"n": 1}), Flush(), Finish()])  # fmt: skip
    asyncio.run(shell(handler, pipeline).run())
    assert handler.calls == [
        ("downstream", b": ka\n\n"), "sse", ("queue", b"a"), ("queue", b"b"), "drain",
        ("delivery", 2.5), "drain", "finish", "keepalive stopped",
    ]  # fmt: skip
    assert pipeline.inputs == []
    assert handler.first_bytes == [("/v1/chat/completions", 2.0)]  # once, at the first flush


def test_a_client_that_left_is_the_pipeline_s_next_input() -> None:
    handler = Handler(gone_on_drain=True)
    pipeline = Scripted([StartStream(), Queue(b"a"), Flush(), Queue(b"rest")],
                        client_gone=[Queue(b"answer")])  # fmt: skip
    asyncio.run(shell(handler, pipeline).run())
    assert pipeline.inputs == [("client_gone", 3)]  # the frames the client had taken
    # The pipeline's answer is performed at once, before the rest of the batch.
    assert handler.calls[3:6] == ["drain", ("queue", b"answer"), ("queue", b"rest")]
    assert handler.outcome_code == "client_gone"


def test_a_failed_action_is_fed_back_and_its_answer_performed() -> None:
    handler, error = Handler(), InvalidRequest("no")
    pipeline = Scripted([Dispatch()], failed=[Queue(b"after")])
    session = Session(handler.calls)

    def dispatch() -> dict[str, Any]:
        raise error

    session.dispatch = dispatch  # type: ignore[method-assign]
    asyncio.run(shell(handler, pipeline, session=session).run())
    assert pipeline.inputs == [("failed", error)]
    assert ("queue", b"after") in handler.calls


def test_the_cache_is_called_as_the_pipeline_asks() -> None:
    handler = Handler()
    session = Session(handler.calls)
    pipeline = Scripted([Dispatch()], dispatched=[Capture(decode("response.created", {"response": {}})), Resolve(),
                                                  Abort("test")])  # fmt: skip
    asyncio.run(shell(handler, pipeline, session=session).run())
    assert pipeline.inputs == [("dispatched", {"input": []})]
    assert handler.calls[1:5] == [
        "dispatch", ("header", "X-Relay-Replay", "none; reason=unmatched"),
        ("feed", "response.created"), "delivered",
    ]  # fmt: skip
    assert ("abort", "test") in handler.calls


@pytest.mark.parametrize(
    ("action", "says"),
    [(Dispatch(), "without a cache session"), (Capture(decode("e", {})), "without a cache session"),
     (Resolve(), "without a cache session"), (Record(), "without a strict capture")],
)  # fmt: skip
def test_an_action_without_what_it_needs_is_a_bug_not_an_answer(action: Action, says: str) -> None:
    with pytest.raises(AssertionError, match=says):
        asyncio.run(shell(Handler(), Scripted([action])).run())


def test_an_action_the_shell_does_not_perform_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="is not performed here"):
        asyncio.run(shell(Handler(), Scripted([cast(Any, object())])).run())


def test_a_failure_before_anything_was_sent_is_raised_for_the_handler_to_answer() -> None:
    handler, error = Handler(), InvalidRequest("bad", param="model")
    with pytest.raises(InvalidRequest) as info:
        asyncio.run(shell(handler, Scripted([Fail(error, b"data: x\n\n")])).run())
    assert info.value is error
    assert not any(isinstance(c, tuple) and c[0] == "send" for c in handler.calls)
    assert handler.calls[-1] == "keepalive stopped"  # stopped on the way out too


def test_a_failure_once_the_answer_began_ends_the_stream_with_its_frame(
    caplog: pytest.LogCaptureFixture,
) -> None:
    handler, error = Handler(), InvalidRequest("bad", code="some_code")
    pipeline = Scripted([StartStream(), Fail(error, b"data: error\n\n"), Queue(b"never")])
    with caplog.at_level(logging.INFO, logger="relay"):
        asyncio.run(shell(handler, pipeline).run())
    assert handler.calls[-3:] == [("send", b"data: error\n\n"), "finish", "keepalive stopped"]
    assert handler.outcome_code == "some_code"
    assert "stream_failed request_id=req_test code=some_code" in caplog.text


def test_finish_is_skipped_when_the_client_is_gone() -> None:
    handler = Handler()
    handler.down.closed = True
    asyncio.run(shell(handler, Scripted([Finish()])).run())
    assert "finish" not in handler.calls
