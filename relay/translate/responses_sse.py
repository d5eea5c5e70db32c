"""Responses API SSE frames, as the ``/v1/responses`` passthrough forwards them."""

from __future__ import annotations

from typing import Any, Final

from relay.translate.chat_sse import compact_json

# As for Chat frames (and NaN passed on, as json.dumps always passed it here).
_to_json: Final = compact_json(allow_nan=True)


def encode_event(event_type: str, data: dict[str, Any]) -> bytes:
    text = _to_json(data)
    return f"event: {event_type}\ndata: {text}\n\n".encode()
