"""What the offline fake model answers (fake-upstream scripts, see fakeupstream.scripts).

A check passes one of these with each request whose live answer it relies on (``pong``,
a tool call, a colour): offline the fake then says what a real model was asked to say,
and the check's live assertions run unchanged. Live runs ignore them.
"""

from __future__ import annotations

import json
from typing import Any

Script = dict[str, Any]


def _reasoning(topic: str) -> dict[str, Any]:
    return {"type": "reasoning", "summary": [f"Thinking about {topic}"], "text": topic}


def say(text: str) -> Script:
    """A reasoning item, then ``text``."""
    return {"output": [_reasoning(text[:40]), {"type": "message", "text": text}]}


def call(*calls: tuple[str, dict[str, Any]]) -> Script:
    """A reasoning item, then these function calls (in parallel when more than one)."""
    items: list[dict[str, Any]] = [_reasoning("which tool to call")]
    for name, arguments in calls:
        items.append({"type": "function_call", "name": name, "arguments": json.dumps(arguments)})
    return {"output": items}


def slow(text: str, *, deltas: int, latency_ms: int) -> Script:
    """``text`` in ``deltas`` pieces, ``latency_ms`` apart after the first few events: a
    stream that stays open long enough to be held or cancelled."""
    script = say(text)
    script["deltas"] = deltas
    script["toxics"] = {"latency_ms": latency_ms, "latency_after_events": 8}
    return script


def truncated() -> Script:
    """Output cut by ``max_output_tokens``: a ``status: incomplete`` response."""
    return {
        "output": [_reasoning("a long essay"), {"type": "message", "text": "Rivers are"}],
        "status": "incomplete",
        "incomplete_reason": "max_output_tokens",
    }


def http_error(status: int, message: str, *, code: str | None, param: str | None) -> Script:
    return {
        "http_error": {
            "status": status,
            "type": "invalid_request_error",
            "message": message,
            "code": code,
            "param": param,
        }
    }


def custom_call(name: str, text: str) -> Script:
    """A reasoning item, then a call of custom (freeform/grammar) tool ``name``."""
    item = {"type": "custom_tool_call", "name": name, "input": text}
    return {"output": [_reasoning("which edit to make"), item]}
