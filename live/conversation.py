"""Building blocks of the checks' conversations: messages, the weather tool, answers."""

from __future__ import annotations

import json
import re
from typing import Any

from live.client import Message, Turn
from live.verdict import CheckFailed

WEATHER_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "City name"}},
                "required": ["city"],
            },
        },
    }
]


def user(text: str) -> Message:
    return {"role": "user", "content": text}


def tool_result(call_id: str, content: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def word(text: str) -> str:
    """An answer reduced to its one word: lower case, no surrounding punctuation."""
    return re.sub(r"^[^\w]+|[^\w]+$", "", text.strip().lower())


def expect_word(turn: Turn, expected: str) -> None:
    if word(turn.text) != expected:
        raise CheckFailed(f"{turn.label}: expected the answer {expected!r}, got {turn.text[:80]!r}")


def called_cities(turn: Turn) -> list[str]:
    """The ``city`` argument of each get_weather call in ``turn`` (lower case)."""
    cities = []
    for call in turn.tool_calls:
        function = call.get("function", {})
        if function.get("name") != "get_weather":
            raise CheckFailed(f"{turn.label}: the model called {function.get('name')!r}")
        try:
            cities.append(str(json.loads(function.get("arguments") or "{}")["city"]).lower())
        except (ValueError, KeyError, TypeError):
            raise CheckFailed(
                f"{turn.label}: get_weather arguments {function.get('arguments')!r} name no city"
            ) from None
    return cities
