"""POST /v1/chat/completions: read the body within limits, translate, relay, convert back."""

from __future__ import annotations

from typing import Any

from relay import log
from relay.crashpoints import crash_point
from relay.errors import UpstreamHTTPError, UpstreamProtocolError
from relay.handlers.chat_provider import relay_chat_provider
from relay.handlers.relaying import RelayingHandler
from relay.providers import Provider
from relay.reasoning.capture import ClientProjection
from relay.reasoning.session import CacheSession
from relay.routing import resolve_model
from relay.translate.chat_sse import DONE, KEEPALIVE, encode_chunk, encode_error
from relay.translate.chat_to_responses import TranslatedRequest, translate_request
from relay.translate.responses_to_chat import response_to_chat_completion
from relay.translate.stream_converter import ChatStreamConverter
from relay.transport.upstream import BatchDone, ClientGone, EventSink


class ChatCompletionsHandler(RelayingHandler):
    _provider: Provider | None = None  # the Responses provider of this request

    async def post(self) -> None:
        if self._finished:
            return
        config = self.runtime.config
        body = self.json_body()
        target = resolve_model(body.get("model"), config.model_aliases, self.runtime.providers)
        provider = self.runtime.providers[target.provider]
        if provider.kind == "chat":
            await relay_chat_provider(self, body, target, provider)
            return
        self._provider = provider
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
        session = self.runtime.cache.begin(
            request, body, self.request_id, upstream=self.runtime.cache_identity(provider)
        )
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

    async def _run_upstream(
        self,
        session: CacheSession | None,
        request: TranslatedRequest,
        sink: EventSink,
        *,
        buffered: bool,
        batch_done: BatchDone | None = None,
    ) -> None:
        """One generation upstream. A refusal of the replayed state is its own outcome
        (the session decides it and retires the blocks): the request is resent once
        without replay, in the same client request -- nothing was generated, nothing has
        reached the client -- or, with resending off, the refusal is the answer."""

        async def send(body: dict[str, Any]) -> None:
            exchange = self.exchange_for(
                body, sink, buffered=buffered, batch_done=batch_done, provider=self._provider
            )
            await self.run_exchange(exchange)

        # The cache plans and records its dispatch intent here, synchronously; the send
        # starts with no await in between.
        try:
            await send(session.dispatch() if session else dict(request.upstream_body))
        except UpstreamHTTPError as err:
            refusal = session.refused(err) if session is not None else None
            if refusal is None:
                raise
            if refusal.resend is None:
                raise refusal.error from None
            await send(refusal.resend)

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
            await self._run_upstream(session, request, sink, buffered=True)
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
        if not await self.deliver_json(completion):
            return
        crash_point("after_terminal_frame")
        self.finish()
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
        down = self.downstream(keepalive_frame=KEEPALIVE)

        sent = ClientProjection()
        output_flushed = False  # the first output chunk has been flushed

        async def sink(event_type: str, data: dict[str, Any]) -> None:
            nonlocal output_flushed
            if session is not None:
                session.feed(event_type, data)
            chunks = converter.feed(event_type, data)
            if session is not None:  # what the client got matters to the cache alone
                for chunk in chunks:
                    sent.feed_chunk(chunk)
            if converter.finished:
                if session is not None:
                    session.complete(sent)  # committed before any terminal frame is queued
                down.start_delivery(config.delivery_timeout_ms / 1000)
            if chunks:
                self.start_sse(down)
            for chunk in chunks:
                if converter.finished and chunk is chunks[-1]:
                    crash_point("before_terminal_frame")
                down.queue(encode_chunk(chunk))
            if converter.finished:
                await down.drain()  # the terminal frames go out before anything else happens
                crash_point("after_terminal_frame")
            elif not output_flushed and converter.output_started:
                # The first output is what the client is waiting for: it goes out now, not
                # after the rest of this read's events (up to READ_CHUNK_BYTES) are converted.
                output_flushed = True
                await down.drain()

        async with self.streaming(down, lambda err: encode_error(err.envelope())):
            await self._run_upstream(session, request, sink, buffered=False, batch_done=down.drain)
            self.start_sse(down)
            await down.send(DONE)
            crash_point("after_done_frame")
            if session is not None:
                session.delivered()
            log.event("chat_done", request_id=self.request_id, finish=converter.finish_reason)
