"""Which upstream model, and which provider, a client-visible model name means."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from relay.errors import InvalidRequest
from relay.settings.model_alias import ModelAlias


def resolve_model(
    name: object, aliases: Mapping[str, ModelAlias], providers: Collection[str] = ()
) -> ModelAlias:
    """An alias resolves to its configuration (its ``provider`` included).

    Otherwise ``<provider>/<model>`` addresses ``model`` at a configured provider, and any
    other name passes through unchanged to the built-in ``openai`` upstream. The prefix
    splits only when it names a configured provider: model names behind an
    OpenAI-compatible base URL may contain slashes themselves (``openai/gpt-5`` on a
    router), so ``openai/`` is not special.
    """
    if not isinstance(name, str) or not name.strip():
        raise InvalidRequest(
            "'model' is required: a model name or one of the relay's aliases (GET /v1/models)",
            param="model",
        )
    alias = aliases.get(name)
    if alias is not None:
        return alias
    prefix, slash, model = name.partition("/")
    if slash and model.strip() and prefix in providers:
        return ModelAlias(name=name, model=model, provider=prefix)
    return ModelAlias(name=name, model=name)
