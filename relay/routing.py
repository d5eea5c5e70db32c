"""Which upstream model a client-visible model name means."""

from __future__ import annotations

from collections.abc import Mapping

from relay.config import ModelAlias
from relay.errors import InvalidRequest


def resolve_model(name: object, aliases: Mapping[str, ModelAlias]) -> ModelAlias:
    """An alias resolves to its configuration; any other name passes through unchanged."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidRequest(
            "'model' is required: a model name or one of the relay's aliases (GET /v1/models)",
            param="model",
        )
    alias = aliases.get(name)
    return alias if alias is not None else ModelAlias(name=name, model=name)
