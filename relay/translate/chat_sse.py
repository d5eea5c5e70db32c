"""Downstream Chat Completions SSE frames: ``data: <json>\\n\\n`` lines, no ``event:`` line.

JSON is compact and UTF-8; ``json.dumps`` escapes CR and LF, so a frame is always exactly
one ``data:`` line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

DONE: bytes = b"data: [DONE]\n\n"
# A comment line: EventSource parsers and the openai SDK skip it; proxies see traffic.
KEEPALIVE: bytes = b": keepalive\n\n"
# Built once: json.dumps with any non-default option builds an encoder per call, and a
# stream encodes one frame per delta.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _frame(payload: Mapping[str, Any]) -> bytes:
    return b"data: " + _ENCODER.encode(payload).encode("utf-8") + b"\n\n"


def encode_chunk(chunk: Mapping[str, Any]) -> bytes:
    """One ``chat.completion.chunk`` as an SSE frame."""
    return _frame(chunk)


def encode_error(envelope: Mapping[str, Any]) -> bytes:
    """An error envelope (``{"error": {...}}``) as an SSE frame; the SDK raises on it."""
    if not isinstance(envelope.get("error"), Mapping):
        raise TypeError("an error frame needs an OpenAI error envelope: {'error': {...}}")
    return _frame(envelope)
