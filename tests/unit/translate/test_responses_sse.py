"""relay.translate.responses_sse: Responses API SSE frames for the passthrough."""

from __future__ import annotations

import json
from typing import Any

from relay.translate.responses_sse import encode_event


def test_responses_events_are_compact_and_pass_nan_on_as_before() -> None:
    data: dict[str, Any] = {"type": "response.output_text.delta", "delta": "é", "n": float("nan")}
    expected = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    assert encode_event(data["type"], data) == (
        f"event: response.output_text.delta\ndata: {expected}\n\n".encode()
    )
