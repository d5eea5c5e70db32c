"""``GET /v1/models``: the relay's aliases, then the upstream's own models.

OpenAI's list shape (``{"object": "list", "data": [...]}``), so SDKs and Cursor can show
which names work. The upstream part comes from :class:`~relay.upstream_models.UpstreamModels`
(cached, one fetch shared by concurrent requests, never an error): while the upstream
cannot say, the aliases alone are listed and the answer is still 200.
"""

from __future__ import annotations

import json

from relay.handlers.base import BaseHandler
from relay.model_list import models_page
from relay.runtime import Runtime
from relay.upstream_models import UpstreamModels


class ModelsHandler(BaseHandler):
    def initialize(  # type: ignore[override]  # Tornado passes the route's arguments
        self, runtime: Runtime, models: UpstreamModels
    ) -> None:
        super().initialize(runtime)
        self.models = models

    async def get(self) -> None:
        upstream = await self.models.current()
        self.finish(json.dumps(models_page(self.runtime.config.model_aliases, upstream)))
