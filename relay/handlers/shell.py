"""The I/O shell of every request pipeline (relay.pipeline): it performs the actions a
pipeline returns -- on the handler (frames, flushes, the answer), the upstream exchange
and the caches -- and feeds each outcome back. It decides nothing about ordering: on any
exit path it feeds the pipeline its ending (``abandoned``) and performs what that asks."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import assert_never

from relay.app.runtime import Runtime
from relay.cache.replay_cache import Began
from relay.cache.session import CacheSession
from relay.core import replay_header as replay
from relay.core.replay_header import HEADER
from relay.core.token_usage import USAGE_EVENTS, usage_of_event
from relay.errors import RelayError
from relay.handlers.relaying import RelayingHandler
from relay.observability import log
from relay.ops.hooks import first_byte
from relay.ops.metrics import CLIENT_GONE
from relay.pipeline.actions import (
    Abort,
    Accepted,
    Action,
    Begin,
    CheckRefusal,
    Commit,
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
    Respond,
    SendUpstream,
    StartDelivery,
    StartStream,
    Stop,
)
from relay.pipeline.base import Pipeline
from relay.settings.crashpoints import crash_point
from relay.settings.providers import BUILTIN, Provider
from relay.transport.upstream import ClientGone, Dialect
from relay.upstream.health import exchange_outcome


class PipelineShell:
    """Performs one pipeline's actions on the handler, the upstream and the caches."""

    def __init__(
        self,
        handler: RelayingHandler,
        pipeline: Pipeline,
        *,
        provider: Provider,
        dialect: Dialect,
        keepalive: bytes | None,
        begin: Callable[[], Began] | None = None,
        record: Callable[[], None] | None = None,
    ) -> None:
        self.handler = handler
        self.pipeline = pipeline
        self.provider = provider
        self.dialect = dialect  # RESPONSES (a JSON body, encoded here) or CHAT_STREAM
        self.begin = begin  # the cache's decision for this request (Begin)
        self.began: Began | None = None
        self.session: CacheSession | None = None
        self.record = record
        self.down = handler.downstream(keepalive_frame=keepalive)
        self._first_byte_seen = False  # for relay_time_to_first_byte_seconds
        self._upstream_wait: float | None = None  # sends' waits for a first event, summed

    async def run(self) -> None:
        try:
            await self._perform(self.pipeline.start())
        finally:
            self.down.stop_keepalive()
            # The pipeline's own ending, whatever ended the shell: an undelivered
            # generation is aborted (only cache actions, which never raise, follow).
            for action in self.pipeline.abandoned():
                await self._one(action)
            if self.session is not None:
                self._runtime.sessions.discard(self.session)

    async def _perform(self, actions: list[Action]) -> None:
        """Perform ``actions`` in order; a failure or a client that left is the pipeline's
        next input, and what it returns is performed in turn."""
        for action in actions:
            if isinstance(action, Fail):
                await self._fail(action)
                return
            try:
                follow = await self._one(action)
            except ClientGone:
                self.handler.outcome_code = CLIENT_GONE
                follow = self.pipeline.client_gone(self.down.frames_sent)
            except RelayError as err:
                follow = self.pipeline.failed(err)
            await self._perform(follow)

    async def _streamed(self, actions: list[Action]) -> None:
        """Perform the actions of one upstream event (or read). Failures propagate: they
        leave the event loop, which ends the exchange, and are then the pipeline's input."""
        for action in actions:
            follow = await self._one(action)
            await self._streamed(follow)

    async def _one(self, action: Action) -> list[Action]:
        """Perform one action; the pipeline's answer to its outcome (often nothing)."""
        handler, pipeline, down = self.handler, self.pipeline, self.down
        match action:
            case Queue(frame=frame, crash_point=point):
                if point:
                    crash_point(point)
                down.queue(frame)
            case Flush(crash_point=point):
                await down.drain()
                self._first_byte()
                if point:
                    crash_point(point)
            case StartStream():
                handler.start_sse(down)
            case StartDelivery():
                down.start_delivery(handler.runtime.config.delivery_timeout_ms / 1000)
            case Log(event=event, fields=fields):
                log.event(event, **fields)
            case Begin():
                return self._begin()
            case Fence() | Poison():
                assert self.began is not None, "a guard before Begin"
                self.began.write_guard()
                return pipeline.guarded()
            case Dispatch():
                # Planned and recorded synchronously; the send follows with no await between.
                body = self._cache().dispatch()
                handler.set_header(HEADER, replay.for_plan(self._cache().plan))
                return pipeline.dispatched(body)
            case SendUpstream():
                await self._send(action)
                return pipeline.upstream_done()
            case Accepted():
                self._cache().accepted()
            case Commit(result=result):
                self._cache().complete(result)
                return pipeline.committed()
            case CheckRefusal(error=error):
                refusal = self._cache().refused(error)
                if refusal is None:
                    return pipeline.refusal(None, error)
                if refusal.resend is not None:  # before any byte of the answer: headers open
                    handler.set_header(HEADER, replay.none(replay.REPLAY_REJECTED))
                return pipeline.refusal(refusal.resend, refusal.error)
            case Respond(answer=answer):
                crash_point("before_terminal_frame")
                await handler.send_json(answer)
                self._first_byte()
                crash_point("after_terminal_frame")
                return pipeline.responded()
            case Resolve():
                self._cache().delivered()
            case Abort(reason=reason, poison=poison):
                self._cache().abort(reason, poison=poison)
            case Stop(error=error):
                raise error  # inside the event loop: the exchange ends with this error
            case Record():
                assert self.record is not None, "a Record action without a strict capture"
                self.record()
            case Finish():
                if not handler.response_state.finished and not down.closed:
                    handler.finish()
            case Fail():
                raise TypeError("Fail ends the batch: performed by _fail")
            case _:
                assert_never(action)
        return []

    def _begin(self) -> list[Action]:
        """The cache's decision: its session, the replay header when there is none, and
        the guard to write before forwarding."""
        assert self.begin is not None, "a Begin action without a cache"
        began = self.began = self.begin()
        session = self.session = began.session
        if session is None:  # a session sets it once planned (Dispatch)
            skipped = began.skipped
            self.handler.set_header(HEADER, replay.none(skipped) if skipped else replay.OFF)
            capture_bytes = None
        else:
            self._runtime.sessions.add(session)
            capture_bytes = session.capture_bytes
        guard = Fence() if began.guard == "fence" else Poison() if began.guard else None
        return self.pipeline.began(capture_bytes, guard)

    @property
    def _runtime(self) -> Runtime:
        return self.handler.runtime

    async def _fail(self, action: Fail) -> None:
        handler = self.handler
        if not handler.response_state.headers_sent:
            raise action.error  # nothing reached the client: the handler answers with it
        log.event("stream_failed", request_id=handler.request_id, code=action.error.code)
        handler.outcome_code = action.error.code or "stream_failed"
        if action.frame is not None:
            with contextlib.suppress(ClientGone):
                await self.down.send(action.frame)
        if not handler.response_state.finished and not self.down.closed:
            handler.finish()

    async def _send(self, action: SendUpstream) -> None:
        """Post the body and hand each upstream event to the pipeline, performing what it
        returns before the next is read (backpressure); a failure while doing so ends
        the exchange and propagates."""
        clock, metrics = self.handler.runtime.clock, self.handler.runtime.metrics
        sent_at, answered = clock.monotonic(), False
        handler, pipeline = self.handler, self.pipeline
        handler.upstream_model = action.body.get("model")  # token accounting
        if self.dialect is Dialect.RESPONSES:
            exchange = await handler.exchange_for(
                action.body, buffered=action.buffered, provider=self.provider
            )
        else:
            exchange = handler.open_exchange(
                self.provider,
                json.dumps(action.body, ensure_ascii=False).encode("utf-8"),
                buffered=action.buffered,
                dialect=Dialect.CHAT_JSON if action.buffered else Dialect.CHAT_STREAM,
            )
        try:
            with handler.exchanging(exchange):
                async with contextlib.aclosing(exchange.events()) as events:
                    async for item in events:
                        if isinstance(item, tuple):
                            if not answered:
                                answered = True
                                elapsed = clock.monotonic() - sent_at
                                self._waited(elapsed)
                                metrics.observe_upstream(self.provider.name, elapsed)
                            if item[0] in USAGE_EVENTS:  # the answer's usage, for accounting
                                handler.answer_usage = usage_of_event(*item)
                            await self._streamed(pipeline.upstream_event(*item))
                        elif not action.buffered:  # the end of one read: a stream flushes
                            await self._streamed(pipeline.batch_done())
        except RelayError as err:
            self._evidence(err)
            raise
        else:
            self._evidence(None)
        finally:
            if not answered:  # an error answer, a timeout: its latency still counts
                self._waited(clock.monotonic() - sent_at)
                metrics.observe_upstream(self.provider.name, clock.monotonic() - sent_at)

    def _waited(self, seconds: float) -> None:
        self._upstream_wait = (self._upstream_wait or 0.0) + seconds

    def _evidence(self, error: RelayError | None) -> None:
        """The built-in upstream's reachability, for /readyz (relay.upstream.health)."""
        outcome = exchange_outcome(error)
        if outcome is not None and self.provider.name == BUILTIN:
            runtime = self.handler.runtime
            runtime.upstream_health.record(*outcome, runtime.clock.monotonic())

    def _first_byte(self) -> None:
        handler = self.handler
        if not self._first_byte_seen and handler.response_state.headers_sent:
            self._first_byte_seen = True
            seconds = handler.runtime.clock.monotonic() - handler.arrived_at
            handler.runtime.metrics.observe_first_byte(handler.request.path, seconds)
            first_byte(handler.runtime, seconds, self._upstream_wait)

    def _cache(self) -> CacheSession:
        assert self.session is not None, "a cache action without a cache session"
        return self.session
