"""POST /v1/chat/completions: read the body within limits, translate, and drive the
request's pipeline (relay.pipeline.chat), performing the actions it returns.

The handler decides nothing about ordering, and holds no cache rule: the pipeline begins
with the cache's decision (Begin, then any fence or poison before forwarding) and its
shell performs every cache action, the ending included.
"""

from __future__ import annotations

from typing import Any, Final

from relay.handlers.chat_provider import relay_chat_provider
from relay.handlers.relaying import RelayingHandler
from relay.handlers.shell import PipelineShell
from relay.observability import log
from relay.pipeline.chat import ChatPipeline
from relay.settings.routing import resolve_model
from relay.translate.chat_sse import KEEPALIVE
from relay.translate.parameters import droppable_in
from relay.translate.request import translate_request
from relay.transport.upstream import Dialect

DROPPED_HEADER: Final = "X-Relay-Dropped-Params"


class ChatCompletionsHandler(RelayingHandler):
    async def post(self) -> None:
        if self.response_state.finished:
            return
        runtime = self.runtime
        config = runtime.config
        body = await self.json_body()
        target = resolve_model(body.get("model"), config.model_aliases, runtime.providers)
        provider = runtime.providers[target.provider]
        if provider.kind == "chat":
            await relay_chat_provider(self, body, target, provider)
            return
        if config.drop_unsupported_params and "messages" in body:
            body = self._drop_unsupported(body)
        request = await self.off_loop(
            translate_request,
            body,
            target,
            reasoning_summaries=config.reasoning_summaries_as_content,
            custom_tool_calls=config.custom_tool_calls,
        )
        self.body_shape = request.shape  # token accounting: a chat or Responses-shaped body
        pipeline = ChatPipeline(
            request,
            request_id=self.request_id,
            model=target.model,
            completion_id=runtime.new_id("chatcmpl-"),
            created=int(runtime.clock.wall()),
            reasoning_summaries=config.reasoning_summaries_as_content,
        )
        shell = PipelineShell(
            self,
            pipeline,
            provider=provider,
            dialect=Dialect.RESPONSES,
            keepalive=KEEPALIVE if request.stream else None,
            # The cache decides inside the pipeline (its Begin), before anything is sent.
            begin=lambda: runtime.cache.decide(
                request, body, self.request_id, upstream=runtime.cache_identity(provider)
            ),
        )
        await shell.run()

    def _drop_unsupported(self, body: dict[str, Any]) -> dict[str, Any]:
        """RELAY_DROP_UNSUPPORTED_PARAMS=1: ``body`` without what the Responses API cannot
        take; the answer says which (``X-Relay-Dropped-Params``), the log names each
        parameter the first time this process drops it."""
        dropped = droppable_in(body)
        if not dropped:
            return body
        self.set_header(DROPPED_HEADER, ",".join(dropped))
        for name in dropped:
            if name not in self.runtime.dropped_params:
                self.runtime.dropped_params.add(name)
                log.event("param_dropped", param=name, setting="RELAY_DROP_UNSUPPORTED_PARAMS")
        return {key: value for key, value in body.items() if key not in dropped}
