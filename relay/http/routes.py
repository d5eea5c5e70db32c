"""The relay's routes, stated once: the server's URL table (relay.app.server), the metrics'
route labels (relay.ops.metrics) and the 404 message's list are all read from here."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Route:
    path: str  # as documented; ``{id}``: the rest of the path (``<provider>/<model>``)
    methods: tuple[str, ...]
    label: str  # the metrics label (bounded: one per route, not per path)

    @property
    def pattern(self) -> str:
        """Tornado's URL pattern; ``{id}`` becomes a captured group."""
        return re.escape(self.path).replace(re.escape("{id}"), "(.+)")


ROUTES: Final = (
    Route("/v1/chat/completions", ("POST",), "chat_completions"),
    Route("/chat/completions", ("POST",), "chat_completions"),
    Route("/v1/responses", ("POST",), "responses"),
    Route("/responses", ("POST",), "responses"),
    Route("/v1/models", ("GET",), "models"),
    Route("/v1/models/{id}", ("GET",), "models"),  # an id may hold "/": provider/model
    Route("/api/cache/reasoning", ("GET", "DELETE"), "cache_api"),
    Route("/healthz", ("GET",), "healthz"),
    Route("/readyz", ("GET",), "readyz"),
)
OTHER: Final = "other"  # the label of anything else (404s, probes)
_MATCHERS: Final = tuple((re.compile(route.pattern + r"\Z"), route.label) for route in ROUTES)


def label_of(path: str) -> str:
    for matcher, label in _MATCHERS:
        if matcher.match(path):
            return label
    return OTHER


def served() -> str:
    """The routes as the 404 message lists them: ``POST /v1/chat/completions, ...``."""
    return ", ".join(f"{'/'.join(route.methods)} {route.path}" for route in ROUTES)
