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

from relay.cache.replay_cache import Began
from relay.core.planner import Plan
from relay.core.replay_header import PASSTHROUGH
from relay.errors import InvalidRequest, RelayError, StoreFull
from relay.handlers.base import ResponseState
from relay.handlers.shell import PipelineShell
from relay.pipeline.actions import (
    Abort,
    Accepted,
    Action,
    Begin,
    Dispatch,
    Fail,
    Fence,
    Finish,
    Flush,
    Log,
    Poison,
    Queue,
    Record,
    Resolve,
    SendUpstream,
    StartDelivery,
    StartStream,
)
from relay.pipeline.base import Pipeline
from relay.pipeline.passthrough import ResponsesPassthrough
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
    response_state: ResponseState = field(default_factory=ResponseState)
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
            sessions=set(),
        )
        self.arrived_at = 10.0
        self.request = SimpleNamespace(path="/v1/chat/completions")

    def downstream(self, keepalive_frame: bytes | None = None) -> Down:
        self.calls.append(("downstream", keepalive_frame))
        return self.down

    def start_sse(self, down: Down) -> None:
        self.calls.append("sse")
        self.response_state.headers_sent = True

    def finish(self) -> None:
        self.calls.append("finish")
        self.response_state.finished = True

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

    def began(self, capture_bytes: int | None, guard: Fence | Poison | None) -> list[Action]:
        return self._answer("began", capture_bytes, guard)

    def guarded(self) -> list[Action]:
        return self._answer("guarded")

    def abandoned(self) -> list[Action]:  # every run ends with it: not recorded
        return self.answers.get("abandoned", [])


class Session:
    def __init__(self, calls: list[Any]) -> None:
        self.calls = calls
        self.plan = Plan(unmatched=1)  # what dispatch() planned: no block, one unmatched
        self.capture_bytes = 4096

    def dispatch(self) -> dict[str, Any]:
        self.calls.append("dispatch")
        return {"input": []}

    def accepted(self) -> None:
        self.calls.append("accepted")

    def delivered(self) -> None:
        self.calls.append("delivered")

    def abort(self, reason: str, *, poison: bool = True) -> None:
        self.calls.append(("abort", reason, poison))


def shell(handler: Handler, pipeline: Pipeline, *, session: Session | None = None,
          record: Any = None, keepalive: bytes | None = b": ka\n\n",
          begin: Any = None) -> PipelineShell:  # fmt: skip
    performer = PipelineShell(
        cast(Any, handler), pipeline, provider=cast(Any, SimpleNamespace(name="openai")),
        dialect=Dialect.RESPONSES, keepalive=keepalive, begin=begin, record=record,
    )  # fmt: skip
    performer.session = cast(Any, session)  # as if Begin had answered with it
    return performer


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
    pipeline = Scripted([Dispatch()], dispatched=[Accepted(), Resolve(),
                                                  Abort("test", poison=False)])  # fmt: skip
    asyncio.run(shell(handler, pipeline, session=session).run())
    assert pipeline.inputs == [("dispatched", {"input": []})]
    assert handler.calls[1:5] == [
        "dispatch", ("header", "X-Relay-Replay", "none; reason=unmatched"),
        "accepted", "delivered",
    ]  # fmt: skip
    assert ("abort", "test", False) in handler.calls


@pytest.mark.parametrize(
    ("action", "says"),
    [(Dispatch(), "without a cache session"), (Accepted(), "without a cache session"),
     (Resolve(), "without a cache session"), (Record(), "without a strict capture"),
     (Begin(), "without a cache"), (Fence(), "before Begin")],
)  # fmt: skip
def test_an_action_without_what_it_needs_is_a_bug_not_an_answer(action: Action, says: str) -> None:
    with pytest.raises(AssertionError, match=says):
        asyncio.run(shell(Handler(), Scripted([action])).run())


def test_an_action_the_shell_does_not_know_is_a_bug() -> None:
    with pytest.raises(AssertionError, match="unreachable"):
        asyncio.run(shell(Handler(), Scripted([cast(Any, object())])).run())


# --- the cache's decision (Begin) and the shell's ending ------------------------------------


class Decision:
    """A stand-in for ReplayCache.decide: answers with ``began``; its guard is recorded."""

    def __init__(self, calls: list[Any], began: Began) -> None:
        self.calls, self.began = calls, began

    def __call__(self) -> Began:
        self.calls.append("decide")
        return self.began


def test_begin_without_a_session_sets_the_header_and_writes_the_guard_on_its_action() -> None:
    handler = Handler()

    def poison() -> None:
        handler.calls.append("poisoned")

    decide = Decision(handler.calls, Began(None, "capacity_bypass", "poison", poison))
    pipeline = Scripted([Begin()], began=[Poison()], guarded=[Log("forwarded", {})])
    asyncio.run(shell(handler, pipeline, begin=decide).run())
    assert pipeline.inputs == [("began", None, Poison()), ("guarded",)]
    # Decided, header set, then the poison written: only once it is, the pipeline goes on.
    assert handler.calls[1:4] == [
        "decide", ("header", "X-Relay-Replay", "none; reason=capacity_bypass"), "poisoned",
    ]  # fmt: skip


def test_a_guard_that_cannot_be_written_is_the_pipeline_s_failure() -> None:
    handler, error = Handler(), StoreFull("the fence could not be written (SQLITE_FULL)")

    def fence() -> None:
        raise error

    decide = Decision(handler.calls, Began(None, None, "fence", fence))
    pipeline = Scripted([Begin()], began=[Fence()], guarded=[Log("never", {})])
    asyncio.run(shell(handler, pipeline, begin=decide).run())
    assert pipeline.inputs == [("began", None, Fence()), ("failed", error)]
    assert ("header", "X-Relay-Replay", "off") in handler.calls


def test_a_session_is_live_while_the_shell_runs_and_its_ending_is_performed() -> None:
    handler = Handler()
    session = Session(handler.calls)
    seen: list[int] = []
    pipeline = Scripted([Begin()], began=[Log("running", {})],
                        abandoned=[Abort("unfinished")])  # fmt: skip
    decide = Decision(handler.calls, Began(cast(Any, session)))
    original = pipeline.began

    def began(capture_bytes: int | None, guard: Fence | Poison | None) -> list[Action]:
        seen.append(len(handler.runtime.sessions))
        return original(capture_bytes, guard)

    pipeline.began = began  # type: ignore[method-assign]
    asyncio.run(shell(handler, pipeline, begin=decide).run())
    assert pipeline.inputs[0] == ("began", 4096, None)  # the session's capture bound
    assert seen == [1] and handler.runtime.sessions == set()
    # The ending comes last, after the keepalive stopped: the handler holds no cache rule.
    assert handler.calls[-2:] == ["keepalive stopped", ("abort", "unfinished", True)]


def test_the_ending_is_performed_when_the_shell_is_left_by_an_exception() -> None:
    handler, error = Handler(), InvalidRequest("bad")
    session = Session(handler.calls)
    pipeline = Scripted([Fail(error)], abandoned=[Abort("unfinished")])
    with pytest.raises(InvalidRequest):
        asyncio.run(shell(handler, pipeline, session=session).run())
    assert handler.calls[-1] == ("abort", "unfinished", True)


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


# --- the passthrough's fence, performed ----------------------------------------------------


def passthrough_shell(handler: Handler, began: Began) -> tuple[PipelineShell, list[Any]]:
    """A real passthrough pipeline behind the shell, its cache decision ``began`` and its
    upstream send recorded (not performed) in ``handler.calls``."""
    pipeline = ResponsesPassthrough({"model": "gpt-5", "input": "hi"}, request_id="req_test",
                                    stream=True)  # fmt: skip
    performer = shell(handler, pipeline, begin=Decision(handler.calls, began))
    sends: list[Any] = []

    async def send(action: SendUpstream) -> None:
        handler.calls.append("send")
        sends.append(action.body)

    performer._send = send  # type: ignore[method-assign]
    return performer, sends


def test_the_passthrough_s_fence_is_written_before_its_body_is_sent() -> None:
    handler = Handler()

    def fence() -> None:
        handler.calls.append("fenced")

    performer, sends = passthrough_shell(handler, Began(None, PASSTHROUGH, "fence", fence))
    asyncio.run(performer.run())
    assert handler.calls[1:4] == [
        "decide", ("header", "X-Relay-Replay", "none; reason=responses_passthrough"), "fenced",
    ]  # fmt: skip
    assert handler.calls.index("fenced") < handler.calls.index("send")
    assert sends == [{"model": "gpt-5", "input": "hi"}]
    assert handler.runtime.sessions == set()  # never observed


def test_a_passthrough_fence_that_failed_is_raised_and_nothing_is_sent() -> None:
    handler, error = Handler(), StoreFull("the fence could not be written (SQLITE_FULL)")

    def fence() -> None:
        raise error

    performer, sends = passthrough_shell(handler, Began(None, PASSTHROUGH, "fence", fence))
    with pytest.raises(StoreFull) as info:
        asyncio.run(performer.run())
    assert info.value is error  # the handler answers with its status and envelope (503)
    assert sends == [] and "send" not in handler.calls
    assert not any(isinstance(c, tuple) and c[0] == "send" for c in handler.calls)  # no frame
