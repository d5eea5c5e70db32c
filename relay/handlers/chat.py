"""POST /v1/chat/completions: read the body within limits, translate, and drive the
request's pipeline (relay.pipeline.chat), performing the actions it returns.

The handler decides nothing about ordering: it moves bytes, calls the cache session the
pipeline asks it to call, and feeds each outcome back.
"""

from __future__ import annotations

from relay.handlers.chat_provider import relay_chat_provider
from relay.handlers.relaying import RelayingHandler
from relay.handlers.shell import PipelineShell
from relay.pipeline.chat import ChatPipeline
from relay.routing import resolve_model
from relay.translate.chat_sse import KEEPALIVE
from relay.translate.request import translate_request
from relay.transport.upstream import Dialect


class ChatCompletionsHandler(RelayingHandler):
    async def post(self) -> None:
        if self._finished:
            return
        runtime = self.runtime
        config = runtime.config
        body = self.json_body()
        target = resolve_model(body.get("model"), config.model_aliases, runtime.providers)
        provider = runtime.providers[target.provider]
        if provider.kind == "chat":
            await relay_chat_provider(self, body, target, provider)
            return
        request = translate_request(
            body,
            target,
            reasoning_summaries=config.reasoning_summaries_as_content,
            custom_tool_calls=config.custom_tool_calls,
        )
        session = runtime.cache.begin(
            request, body, self.request_id, upstream=runtime.cache_identity(provider)
        )
        pipeline = ChatPipeline(
            request,
            request_id=self.request_id,
            model=target.model,
            cached=session is not None,
            completion_id=runtime.new_id("chatcmpl-"),
            created=int(runtime.clock.wall()),
            reasoning_summaries=config.reasoning_summaries_as_content,
        )
        if session is not None:
            runtime.sessions.add(session)
        try:
            shell = PipelineShell(
                self,
                pipeline,
                provider=provider,
                dialect=Dialect.RESPONSES,
                keepalive=KEEPALIVE if request.stream else None,
                session=session,
            )
            await shell.run()
        finally:
            if session is not None:
                session.abort("unfinished")  # a no-op once delivered or aborted
                runtime.sessions.discard(session)
