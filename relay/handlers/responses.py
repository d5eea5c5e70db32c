"""POST /v1/responses: a passthrough for direct Responses API clients.

The body goes upstream as sent (only a model alias is resolved); events come back as
Responses SSE, or as the final ``response`` object for a non-streaming call. The cache
cannot observe these generations, so before forwarding it *fences* the scopes they may
extend (spec §7): an unobserved generation must never leave an older record looking
unique. If the fence cannot be written the call is refused with 503, never forwarded.
"""

from __future__ import annotations

from typing import Any, Final

from relay import log
from relay.errors import InvalidRequest, RelayError, UpstreamFailed, UpstreamProtocolError
from relay.handlers.relaying import RelayingHandler
from relay.providers import Provider
from relay.routing import resolve_model
from relay.translate.chat_sse import KEEPALIVE, compact_json
from relay.transport.upstream import TERMINAL_EVENTS, ClientGone

# As for Chat frames (and NaN passed on as json.dumps always passed it here).
_to_json: Final = compact_json(allow_nan=True)


def encode_event(event_type: str, data: dict[str, Any]) -> bytes:
    text = _to_json(data)
    return f"event: {event_type}\ndata: {text}\n\n".encode()


class ResponsesHandler(RelayingHandler):
    _provider: Provider | None = None

    async def post(self) -> None:
        if self._finished:
            return
        body = self.json_body()
        runtime = self.runtime
        target = resolve_model(body.get("model"), runtime.config.model_aliases, runtime.providers)
        provider = runtime.providers[target.provider]
        if provider.kind != "responses":
            raise InvalidRequest(
                f"provider {provider.name!r} speaks Chat Completions; send this model to "
                "POST /v1/chat/completions",
                param="model",
            )
        self._provider = provider
        stream = body.get("stream")
        if stream not in (None, True, False):
            raise InvalidRequest("'stream' must be true or false", param="stream")
        caller = body.get("user")
        if caller is not None and not isinstance(caller, str):
            raise InvalidRequest("'user' must be a string", param="user")
        runtime.cache.fence(
            target.model, caller, self.request_id, upstream=runtime.cache_identity(provider)
        )
        upstream_body = {**body, "model": target.model}
        log.event(
            "responses_passthrough", request_id=self.request_id, model=target.model,
            stream=bool(stream),
        )  # fmt: skip
        if stream:
            await self._relay_stream(upstream_body)
        else:
            await self._relay_json(upstream_body)

    async def _relay_json(self, upstream_body: dict[str, Any]) -> None:
        final: dict[str, Any] = {}

        async def sink(event_type: str, data: dict[str, Any]) -> None:
            if event_type == "error":
                raise UpstreamFailed(str(data.get("message") or "the upstream reported an error"))
            if event_type in TERMINAL_EVENTS and isinstance(data.get("response"), dict):
                final.update(data["response"])

        try:
            exchange = self.exchange_for(
                upstream_body, sink, buffered=True, provider=self._provider
            )
            await self.run_exchange(exchange)
        except ClientGone:
            return
        if not final:
            raise UpstreamProtocolError("the upstream stream ended without a final response")
        if await self.deliver_json(final):
            self.finish()

    async def _relay_stream(self, upstream_body: dict[str, Any]) -> None:
        down = self.downstream(keepalive_frame=KEEPALIVE)

        forwarded_error = False

        async def sink(event_type: str, data: dict[str, Any]) -> None:
            nonlocal forwarded_error
            self.start_sse(down)
            down.queue(encode_event(event_type, data))
            if event_type == "error":  # the upstream's own failure, already forwarded
                forwarded_error = True
                await down.drain()
                raise UpstreamFailed(str(data.get("message") or "the upstream reported an error"))

        def error_frame(err: RelayError) -> bytes | None:
            return None if forwarded_error else encode_event("error", err.envelope()["error"])

        async with self.streaming(down, error_frame):
            exchange = self.exchange_for(
                upstream_body, sink, buffered=False, batch_done=down.drain, provider=self._provider
            )
            await self.run_exchange(exchange)
            await down.drain()
