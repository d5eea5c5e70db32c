"""What ``GET /v1/models`` lists: the relay's aliases, then the upstream's own models.

Pure: :func:`parse_upstream_models` reads an upstream's ``GET {base}/models`` answer
(OpenAI's list shape, ``{"object": "list", "data": [{"id", "created", "owned_by"}, ...]}``)
and :func:`models_page` merges it with the aliases into the page the relay serves. The
fetch, its cache and its fallback live in :mod:`relay.upstream.models`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from relay.errors import InternalSignal

ALIAS_OWNER: Final = "relay"
UNKNOWN_OWNER: Final = "upstream"  # an upstream entry that does not say


@dataclass(frozen=True)
class UpstreamModel:
    id: str
    created: int = 0
    owned_by: str = UNKNOWN_OWNER


class MalformedModelList(InternalSignal):
    """The answer is not OpenAI's model list. The message names what is wrong, never the
    answer's text."""


def parse_upstream_models(body: bytes) -> tuple[UpstreamModel, ...]:
    """The models of an upstream's list answer, in its order, each id once.

    Every entry must be an object with a non-blank string ``id``; otherwise the whole answer
    is malformed (a half-understood list is not trusted). ``created`` and ``owned_by`` are
    taken when they have OpenAI's types (an integer, a string), else defaulted.
    """
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise MalformedModelList("the answer is not JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise MalformedModelList("the answer is not an object with a 'data' list")
    models: dict[str, UpstreamModel] = {}
    for index, entry in enumerate(data["data"]):
        model_id = entry.get("id") if isinstance(entry, dict) else None
        if not isinstance(model_id, str) or not model_id.strip():
            raise MalformedModelList(f"data[{index}] is not an object with a string 'id'")
        created = entry.get("created")
        owned_by = entry.get("owned_by")
        models.setdefault(
            model_id,
            UpstreamModel(
                model_id,
                created if isinstance(created, int) and not isinstance(created, bool) else 0,
                owned_by if isinstance(owned_by, str) and owned_by else UNKNOWN_OWNER,
            ),
        )
    return tuple(models.values())


def models_page(
    aliases: Iterable[str],
    upstream: Iterable[UpstreamModel],
    providers: Mapping[str, Iterable[UpstreamModel]] | None = None,
) -> dict[str, Any]:
    """The ``GET /v1/models`` answer: the aliases (sorted), then the upstream's models
    (sorted) except those an alias of the same name hides (the alias is what a request
    with that name gets), then each configured provider's models as ``<provider>/<id>``
    (the name that routes to them, relay.settings.routing), by provider."""
    names = sorted(set(aliases))
    data = [_entry(name, 0, ALIAS_OWNER) for name in names]
    hidden = set(names)
    listed = [(m.id, m) for m in sorted(upstream, key=lambda m: m.id)]
    for name in sorted(providers or {}):
        assert providers is not None
        listed += [(f"{name}/{m.id}", m) for m in sorted(providers[name], key=lambda m: m.id)]
    for model_id, model in listed:
        if model_id not in hidden:
            hidden.add(model_id)
            data.append(_entry(model_id, model.created, model.owned_by))
    return {"object": "list", "data": data}


def find_model(page: Mapping[str, Any], model_id: str) -> dict[str, Any] | None:
    """``GET /v1/models/{id}``: the page's entry of that id."""
    for entry in page["data"]:
        if entry["id"] == model_id:
            return dict(entry)
    return None


def _entry(model_id: str, created: int, owned_by: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": created, "owned_by": owned_by}
