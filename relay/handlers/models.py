"""``GET /v1/models`` and ``GET /v1/models/{id}``: the relay's aliases, then the upstream's
own models, then each configured provider's as ``<provider>/<model>``.

OpenAI's shapes (``{"object": "list", "data": [...]}``, one ``model`` object), so SDKs and
Cursor can show which names work and ``models.retrieve`` works. The lists come from
:class:`~relay.upstream.models.ModelCatalog` (cached, one fetch shared by concurrent
requests, never an error): while an upstream cannot say, what is known is listed and the
answer is still 200; an id not listed is 404 in the OpenAI error envelope.
"""

from __future__ import annotations

import json

from relay.app.runtime import Runtime
from relay.errors import NotFound
from relay.handlers.base import BaseHandler
from relay.upstream.model_list import find_model
from relay.upstream.models import ModelCatalog


class ModelsHandler(BaseHandler):
    def initialize(  # type: ignore[override]  # Tornado passes the route's arguments
        self, runtime: Runtime, models: ModelCatalog
    ) -> None:
        super().initialize(runtime)
        self.models = models

    async def get(self, model_id: str | None = None) -> None:
        page = await self.models.page()
        if model_id is None:
            self.finish(json.dumps(page))
            return
        entry = find_model(page, model_id)
        if entry is None:
            raise NotFound(
                f"the model {model_id!r} is not listed: GET /v1/models lists the names this "
                "relay knows (its aliases, the upstream's models, <provider>/<model>)",
                param="model",
                code="model_not_found",
            )
        self.finish(json.dumps(entry))
