"""What a client-visible model name resolves to (a plain value: configuration, routing
and translation all use it, so it depends on none of them)."""

from __future__ import annotations

from dataclasses import dataclass

from relay.settings.providers import BUILTIN


@dataclass(frozen=True)
class ModelAlias:
    """What a client-visible model name resolves to upstream."""

    name: str
    model: str
    reasoning_effort: str | None = None
    reasoning_summary: str | None = None
    # "auto": decide by model family (relay.translate.sampling); "forward": always send
    # temperature/top_p; "drop": never send them.
    sampling: str = "auto"
    provider: str = BUILTIN  # a RELAY_PROVIDERS name, or the built-in "openai"
    # reasoning.context (GPT-5.6 and later): "auto", "all_turns" or "current_turn"; sent
    # when the client gives none. "all_turns" makes the model use replayed reasoning.
    reasoning_context: str | None = None
