"""The result of translating a client request (pure data, shared by both request shapes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from relay.settings.custom_calls import CustomCallForm


@dataclass(frozen=True)
class TranslatedRequest:
    """A translated request. ``upstream_body`` and its ``input`` list are new objects; other
    values (schemas, metadata, ...) may be shared with the client body: treat them as
    read-only."""

    upstream_body: dict[str, Any]  # Responses body without "stream" (the server adds it)
    stream: bool  # the client asked for SSE
    include_usage: bool  # stream_options.include_usage
    client_model: str  # echoed in answers
    caller: str | None  # the client's `user` value; partitions the cache
    shape: str  # "chat" or "responses"
    # Chat shape: for each client message, the [start, end) range of upstream ``input``
    # items it became (None: merged into ``instructions``). Replay swaps these ranges.
    message_spans: tuple[tuple[int, int] | None, ...] | None = None
    # How a custom tool call reaches the client: the Chat shape always gets the Chat API's
    # own form; the Responses shape gets RELAY_CUSTOM_TOOL_CALLS (see relay.settings.config).
    custom_tool_calls: CustomCallForm = "custom"
