"""``POST /v1/chat/completions`` for a Chat Completions provider (``RELAY_PROVIDERS`` kind
``"chat"``).

The client's body goes upstream as Chat Completions, with the provider's model name, the
alias defaults and messages prepared by the strict cache (``reasoning_content`` restored
for strict thinking-mode providers, stripped for the others). Streaming follows the
client's ``stream``: chunks are forwarded as the provider sent them (``model`` echoed as
the client named it) with the relay's keepalives, delivery deadline and error frames; a
JSON answer is forwarded whole. Upstream HTTP errors keep their status and envelope, so a
provider's own 400 reaches the client unchanged. The answer's reasoning is recorded
before the client gets its terminal frame (``data: [DONE]``, or the JSON body).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from relay import log
from relay.config import ModelAlias
from relay.errors import InvalidRequest
from relay.handlers.relaying import RelayingHandler
from relay.providers import Provider
from relay.strict.cache import PreparedRequest, StrictTarget
from relay.strict.restore import has_tools
from relay.strict.rules import rule_for
from relay.translate.chat_sse import DONE, KEEPALIVE, encode_chunk, encode_error
from relay.translate.chat_to_responses import stream_flags
from relay.transport.upstream import ClientGone, Dialect


def outgoing_body(
    body: Mapping[str, Any], target: ModelAlias, messages: list[Any]
) -> dict[str, Any]:
    """The provider's request: the client's, with the upstream model, the prepared
    messages, an alias's ``reasoning_effort`` when the client sent none, and no
    ``temperature``/``top_p`` when the alias says ``"sampling": "drop"``."""
    out = {**body, "model": target.model, "messages": messages}
    if target.reasoning_effort is not None and body.get("reasoning_effort") is None:
        out["reasoning_effort"] = target.reasoning_effort
    if target.sampling == "drop":
        out.pop("temperature", None)
        out.pop("top_p", None)
    return out


async def relay_chat_provider(
    handler: RelayingHandler, body: dict[str, Any], target: ModelAlias, provider: Provider
) -> None:
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise InvalidRequest(
            f"'messages' is required: provider {provider.name!r} speaks Chat Completions, "
            "so send the conversation as an array of chat messages",
            param="messages",
        )
    stream, _ = stream_flags(body)
    caller = body.get("user")
    if caller is not None and not isinstance(caller, str):
        raise InvalidRequest("'user' must be a string", param="user")
    rule = rule_for(provider.strict, provider.name, target.model)
    prepared = handler.runtime.strict.prepare(
        StrictTarget(provider, target.model, rule, caller),
        messages,
        tools_present=has_tools(body.get("tools")),
        request_id=handler.request_id,
    )
    restored = prepared.restored
    log.event(
        "chat_provider_request",
        request_id=handler.request_id,
        provider=provider.name,
        model=target.model,
        stream=stream,
        rule="none" if rule is None else rule.source,
        restored=0 if restored is None else restored.hits,
        missed=0 if restored is None else restored.misses,
        stripped=prepared.stripped,
    )
    upstream_body = outgoing_body(body, target, prepared.messages)
    payload = json.dumps(upstream_body, ensure_ascii=False).encode("utf-8")
    call = _ChatProviderCall(handler, target, provider, prepared)
    await (call.relay_stream(payload) if stream else call.relay_json(payload))


class _ChatProviderCall:
    """Relaying one prepared request and its answer."""

    def __init__(
        self,
        handler: RelayingHandler,
        target: ModelAlias,
        provider: Provider,
        prepared: PreparedRequest,
    ) -> None:
        self.handler = handler
        self.runtime = handler.runtime
        self.target = target
        self.provider = provider
        self.prepared = prepared
        self.finish_reason: str | None = None

    def _observe(self, data: dict[str, Any], *, whole: bool) -> None:
        """Capture, remember the finish reason, and echo the client's model name."""
        capture = self.prepared.capture
        if capture is not None:
            (capture.feed_completion if whole else capture.feed_chunk)(data)
        choices = data.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if isinstance(choice, dict) and isinstance(choice.get("finish_reason"), str):
                self.finish_reason = choice["finish_reason"]
        if "model" in data:
            data["model"] = self.target.name

    def _commit(self) -> None:
        written = self.runtime.strict.commit(self.prepared, self.handler.request_id)
        if written:
            log.event("strict_captured", request_id=self.handler.request_id, records=written)

    async def relay_json(self, payload: bytes) -> None:
        handler = self.handler
        completion: dict[str, Any] = {}

        async def sink(event_type: str, data: dict[str, Any]) -> None:
            completion.update(data)

        exchange = handler.open_exchange(
            self.provider, payload, sink, buffered=True, batch_done=None,
            dialect=Dialect.CHAT_JSON,
        )  # fmt: skip
        try:
            await handler.run_exchange(exchange)
        except ClientGone:
            log.event("client_disconnected", request_id=handler.request_id, frames=0)
            return
        self._observe(completion, whole=True)
        self._commit()  # before the client has the answer
        if not await handler.deliver_json(completion):
            return
        handler.finish()
        log.event("chat_done", request_id=handler.request_id, finish=self.finish_reason)

    async def relay_stream(self, payload: bytes) -> None:
        handler = self.handler
        down = handler.downstream(keepalive_frame=KEEPALIVE)

        async def sink(event_type: str, chunk: dict[str, Any]) -> None:
            self._observe(chunk, whole=False)
            handler.start_sse(down)
            down.queue(encode_chunk(chunk))

        async with handler.streaming(down, lambda err: encode_error(err.envelope())):
            exchange = handler.open_exchange(
                self.provider, payload, sink, buffered=False, batch_done=down.drain,
                dialect=Dialect.CHAT_STREAM,
            )  # fmt: skip
            await handler.run_exchange(exchange)
            self._commit()  # before the terminal frame
            down.start_delivery(self.runtime.config.delivery_timeout_ms / 1000)
            handler.start_sse(down)
            await down.send(DONE)
            log.event("chat_done", request_id=handler.request_id, finish=self.finish_reason)
