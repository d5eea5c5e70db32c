"""POST /v1/chat/completions: read the body within limits, translate, relay, convert back."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from tornado.iostream import StreamClosedError
from tornado.web import stream_request_body

from relay import log
from relay.crashpoints import crash_point
from relay.errors import PayloadTooLarge, RelayError, UpstreamProtocolError
from relay.handlers.base import BaseHandler
from relay.reasoning.capture import ClientProjection
from relay.reasoning.session import CacheSession
from relay.request_body import parse_json_object
from relay.routing import resolve_model
from relay.translate.chat_sse import DONE, KEEPALIVE, encode_chunk, encode_error
from relay.translate.chat_to_responses import TranslatedRequest, translate_request
from relay.translate.responses_to_chat import response_to_chat_completion
from relay.translate.stream_converter import ChatStreamConverter
from relay.transport.downstream import Downstream
from relay.transport.upstream import BatchDone, ClientGone, UpstreamExchange


@stream_request_body
class ChatCompletionsHandler(BaseHandler):
    def prepare(self) -> None:
        super().prepare()
        self._body = bytearray()
        self._exchange: UpstreamExchange | None = None
        limit = self.runtime.config.max_request_bytes
        declared = self.request.headers.get("Content-Length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise PayloadTooLarge(_too_large(limit))
        # Chunked uploads are limited by data_received alone. Tornado's own body limit
        # (left at the server's "unlimited") must not fire first: Tornado 6.6 coalesces
        # small chunks and would answer a bare 400 before we see the data. Once we have
        # answered 413, Tornado drops the rest of the body and closes the connection.

    def data_received(self, chunk: bytes) -> None:
        if self._finished:
            return
        if len(self._body) + len(chunk) > self.runtime.config.max_request_bytes:
            self.send_relay_error(PayloadTooLarge(_too_large(self.runtime.config.max_request_bytes)))
            return
        self._body += chunk

    def on_connection_close(self) -> None:
        if self._exchange is not None:
            self._exchange.abort(ClientGone())

    async def post(self) -> None:
        if self._finished:
            return
        config = self.runtime.config
        body = parse_json_object(bytes(self._body), self.request.headers.get("Content-Type"))
        self._body = bytearray()
        target = resolve_model(body.get("model"), config.model_aliases)
        request = translate_request(
            body, target, reasoning_summaries=config.reasoning_summaries_as_content
        )
        log.event(
            "chat_request",
            request_id=self.request_id,
            model=target.model,
            stream=request.stream,
            shape=request.shape,
        )
        session = self.runtime.cache.begin(request, body, self.request_id)
        self._completion_id = self.runtime.new_id("chatcmpl-")
        self._created = int(self.runtime.clock.wall())
        converter = ChatStreamConverter(
            completion_id=self._completion_id,
            created=self._created,
            model=request.client_model,
            include_usage=request.include_usage,
            reasoning_summaries=config.reasoning_summaries_as_content,
        )
        if session is not None:
            self.runtime.sessions.add(session)
        try:
            if request.stream:
                await self._relay_stream(request, converter, session)
            else:
                await self._relay_json(request, converter, session)
        finally:
            if session is not None:
                session.abort("unfinished")  # a no-op once delivered
                self.runtime.sessions.discard(session)

    def _exchange_for(
        self,
        request: TranslatedRequest,
        session: CacheSession | None,
        sink: Any,
        *,
        buffered: bool,
        batch_done: BatchDone | None = None,
    ) -> UpstreamExchange:
        # The cache plans and records its dispatch intent here, synchronously; _run_exchange
        # starts sending with no await in between.
        upstream_body = session.dispatch() if session else dict(request.upstream_body)
        # Always streamed upstream, so the idle timer and capture work alike in both modes.
        upstream_body["stream"] = True
        exchange = UpstreamExchange(
            client=self.runtime.http_client,
            clock=self.runtime.clock,
            limits=self.runtime.upstream_limits,
            url=self.runtime.upstream_url,
            headers=self.runtime.upstream_headers(),
            body=json.dumps(upstream_body, ensure_ascii=False).encode("utf-8"),
            sink=sink,
            buffered=buffered,
            batch_done=batch_done,
        )
        self._exchange = exchange
        return exchange

    async def _run_exchange(self, exchange: UpstreamExchange) -> None:
        self.runtime.active.add(exchange)
        crash_point("before_upstream_send")
        try:
            await exchange.run()
        finally:
            self.runtime.active.discard(exchange)
            self._exchange = None

    async def _relay_json(
        self,
        request: TranslatedRequest,
        converter: ChatStreamConverter,
        session: CacheSession | None,
    ) -> None:
        async def sink(event_type: str, data: dict[str, Any]) -> None:
            if session is not None:
                session.feed(event_type, data)
            converter.feed(event_type, data)

        try:
            await self._run_exchange(self._exchange_for(request, session, sink, buffered=True))
        except ClientGone:
            log.event("client_disconnected", request_id=self.request_id, frames=0)
            return
        if converter.final_response is None:
            raise UpstreamProtocolError("the upstream stream ended without a final response")
        completion = response_to_chat_completion(
            converter.final_response,
            completion_id=self._completion_id,
            created=self._created,
            model=request.client_model,
            reasoning_summaries=self.runtime.config.reasoning_summaries_as_content,
        )
        if session is not None:
            session.complete(ClientProjection.from_completion(completion))
        crash_point("before_terminal_frame")
        try:
            await self.finish(json.dumps(completion, ensure_ascii=False))
        except StreamClosedError:
            log.event("client_disconnected", request_id=self.request_id, frames=0)
            return
        crash_point("after_terminal_frame")
        if session is not None:
            session.delivered()
        log.event("chat_done", request_id=self.request_id, finish=converter.finish_reason)

    async def _relay_stream(
        self,
        request: TranslatedRequest,
        converter: ChatStreamConverter,
        session: CacheSession | None,
    ) -> None:
        config = self.runtime.config
        down = Downstream(
            self,
            self.runtime.clock,
            write_timeout_s=config.delivery_timeout_ms / 1000,
            keepalive_s=config.sse_keepalive_ms / 1000,
            keepalive_frame=KEEPALIVE,
        )

        sent = ClientProjection()

        async def sink(event_type: str, data: dict[str, Any]) -> None:
            if session is not None:
                session.feed(event_type, data)
            chunks = converter.feed(event_type, data)
            for chunk in chunks:
                sent.feed_chunk(chunk)
            if converter.finished and session is not None:
                session.complete(sent)  # committed before any terminal frame is queued
            for chunk in chunks:
                if not self._headers_written:
                    self._start_sse(down)
                if converter.finished and chunk is chunks[-1]:
                    crash_point("before_terminal_frame")
                down.queue(encode_chunk(chunk))
            if converter.finished:
                await down.drain()  # the terminal frames go out before anything else happens
                crash_point("after_terminal_frame")

        try:
            exchange = self._exchange_for(
                request, session, sink, buffered=False, batch_done=down.drain
            )
            await self._run_exchange(exchange)
            if not self._headers_written:
                self._start_sse(down)
            await down.send(DONE)
            if session is not None:
                session.delivered()
            log.event("chat_done", request_id=self.request_id, finish=converter.finish_reason)
        except ClientGone:
            log.event("client_disconnected", request_id=self.request_id, frames=down.frames_sent)
        except RelayError as err:
            if not self._headers_written:
                raise  # nothing sent yet: a proper HTTP status and envelope
            log.event("stream_failed", request_id=self.request_id, code=err.code)
            with contextlib.suppress(ClientGone):
                await down.send(encode_error(err.envelope()))  # visible failure, no [DONE]
        finally:
            down.stop_keepalive()
        if not self._finished and not down.closed:
            self.finish()

    def _start_sse(self, down: Downstream) -> None:
        self.set_header("Content-Type", "text/event-stream; charset=utf-8")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")
        down.start_keepalive()


def _too_large(limit: int) -> str:
    return (
        f"request body exceeds RELAY_MAX_REQUEST_BYTES ({limit} bytes); "
        "shorten the conversation or raise the limit"
    )
