"""POST /v1/responses: a passthrough for direct Responses API clients.

The body goes upstream as sent (only a model alias is resolved); events come back as
Responses SSE, or as the final ``response`` object for a non-streaming call
(relay.pipeline.passthrough). The cache
cannot observe these generations, so before forwarding it *fences* the scopes they may
extend (design §7): an unobserved generation must never leave an older record looking
unique. If the fence cannot be written the call is refused with 503, never forwarded.
The handler holds no cache rule: the pipeline opens with the cache's decision (Begin,
then the fence as its own action) and its shell performs them.
"""

from __future__ import annotations

from relay.errors import InvalidRequest
from relay.handlers.relaying import RelayingHandler
from relay.handlers.shell import PipelineShell
from relay.pipeline.passthrough import ResponsesPassthrough
from relay.settings.routing import resolve_model
from relay.translate.chat_sse import KEEPALIVE
from relay.transport.upstream import Dialect


class ResponsesHandler(RelayingHandler):
    async def post(self) -> None:
        if self.response_state.finished:
            return
        body = await self.json_body()
        runtime = self.runtime
        target = resolve_model(body.get("model"), runtime.config.model_aliases, runtime.providers)
        provider = runtime.providers[target.provider]
        if provider.kind != "responses":
            raise InvalidRequest(
                f"provider {provider.name!r} speaks Chat Completions; send this model to "
                "POST /v1/chat/completions",
                param="model",
            )
        stream = body.get("stream")
        if stream not in (None, True, False):
            raise InvalidRequest("'stream' must be true or false", param="stream")
        caller = body.get("user")
        if caller is not None and not isinstance(caller, str):
            raise InvalidRequest("'user' must be a string", param="user")
        self.body_shape = "responses"  # token accounting
        pipeline = ResponsesPassthrough(
            {**body, "model": target.model}, request_id=self.request_id, stream=bool(stream)
        )
        shell = PipelineShell(
            self,
            pipeline,
            provider=provider,
            dialect=Dialect.RESPONSES,
            keepalive=KEEPALIVE if stream else None,
            # The cache decides inside the pipeline (its Begin): the fence, before the send.
            begin=lambda: runtime.cache.decide_passthrough(
                target.model, caller, self.request_id, upstream=runtime.cache_identity(provider)
            ),
        )
        await shell.run()
