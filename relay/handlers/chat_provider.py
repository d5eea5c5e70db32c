"""``POST /v1/chat/completions`` for a Chat Completions provider (``RELAY_PROVIDERS`` kind
``"chat"``).

The client's body goes upstream as Chat Completions, with the provider's model name, the
alias defaults and messages prepared by the strict cache (``reasoning_content`` restored
for strict thinking-mode providers, stripped for the others). Streaming follows the
client's ``stream``: chunks are forwarded as the provider sent them (``model`` echoed as
the client named it) with the relay's keepalives, delivery deadline and error frames; a
JSON answer is forwarded whole (relay.pipeline.provider). Upstream HTTP errors keep their
status and envelope, so a provider's own 400 reaches the client unchanged. The answer's
reasoning is recorded before the client gets its terminal frame (``data: [DONE]``, or the
JSON body).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from relay.core import replay_header as replay
from relay.core.replay_header import HEADER
from relay.errors import InvalidRequest
from relay.handlers.relaying import RelayingHandler
from relay.handlers.shell import PipelineShell
from relay.observability import log
from relay.pipeline.provider import ChatProviderPipeline
from relay.settings.model_alias import ModelAlias
from relay.settings.providers import Provider
from relay.strict.restore import has_tools
from relay.strict.rules import rule_for
from relay.strict.strict_cache import StrictTarget
from relay.translate.chat_sse import KEEPALIVE
from relay.translate.parameters import stream_flags
from relay.transport.upstream import Dialect


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
    handler.set_header(HEADER, replay.none(replay.CHAT_PROVIDER))
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
    pipeline = ChatProviderPipeline(
        outgoing_body(body, target, prepared.messages),
        request_id=handler.request_id,
        client_model=target.name,
        stream=stream,
        capture=prepared.capture,
    )

    def record() -> None:
        written = handler.runtime.strict.commit(prepared, handler.request_id)
        if written:
            log.event("strict_captured", request_id=handler.request_id, records=written)

    shell = PipelineShell(
        handler,
        pipeline,
        provider=provider,
        dialect=Dialect.CHAT_STREAM,
        keepalive=KEEPALIVE if stream else None,
        record=record,
    )
    await shell.run()
