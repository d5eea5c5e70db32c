"""Acceptance against the real API: JSON, streaming, Cursor's temperature 0, a tool turn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from live.harness import LIVE_MODEL, live_relay

pytestmark = pytest.mark.live

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def test_json_and_stream_answers(tmp_path: Path) -> None:
    with live_relay(tmp_path) as client:
        messages = [{"role": "user", "content": "Reply with exactly the word: pong"}]
        # Cursor's temperature 0 must not break a reasoning model.
        completion = client.chat.completions.create(
            model=LIVE_MODEL, messages=messages, temperature=0
        )
        assert "pong" in (completion.choices[0].message.content or "").lower()
        assert completion.choices[0].finish_reason == "stop"
        chunks = list(
            client.chat.completions.create(
                model=LIVE_MODEL,
                messages=messages,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert "pong" in text.lower()
        assert chunks[-1].usage is not None


def test_tool_turn_round_trip(tmp_path: Path) -> None:
    with live_relay(tmp_path) as client:
        messages: list[dict[str, object]] = [
            {"role": "user", "content": "What is the weather in Paris? Use the tool."}
        ]
        first = client.chat.completions.create(
            model=LIVE_MODEL, messages=messages, tools=TOOLS, tool_choice="required"
        )
        call = first.choices[0].message.tool_calls[0]
        assert first.choices[0].finish_reason == "tool_calls"
        assert json.loads(call.function.arguments)["city"].lower().startswith("paris")
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 C"},
        ]
        second = client.chat.completions.create(model=LIVE_MODEL, messages=messages, tools=TOOLS)
        assert "21" in (second.choices[0].message.content or "")


def test_unknown_model_keeps_openai_error(tmp_path: Path) -> None:
    import openai

    with live_relay(tmp_path) as client, pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(
            model="no-such-model-relay-live", messages=[{"role": "user", "content": "x"}]
        )
    assert info.value.status_code in (400, 404)
