"""Real Cursor requests and real OpenAI streams, through the relay end to end.

The fake replays each recorded upstream stream byte for byte, whole and re-chunked; the
client must get the recorded text and tool calls in a strictly valid chunk stream.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests
from openai.types.chat import ChatCompletionChunk

from tests.support import recordings
from tests.support.stack import Stack

NAMES = recordings.names()


def recorded_output(sse: str) -> tuple[str, list[tuple[str, str, str]]]:
    """Ground truth from the streamed events: the text deltas and the finished calls.

    Not from the ``response.completed`` body: the recorder redacted message texts there
    (and in some finished message items) but not in the deltas.
    """
    text = ""
    calls = []
    for block in sse.split("\n\n"):
        for line in block.splitlines():
            if not line.startswith("data: "):
                continue
            data = json.loads(line[6:])
            if data.get("type") == "response.output_text.delta":
                text += data["delta"]
            elif data.get("type") == "response.output_item.done":
                item = data["item"]
                if item["type"] == "function_call":
                    calls.append((item["call_id"], item["name"], item["arguments"]))
    return text, calls


def collect(frames: list[str]) -> tuple[str, list[tuple[str, str, str]], str | None]:
    text = ""
    calls: dict[int, list[str]] = {}
    finish = None
    for frame in frames:
        chunk = ChatCompletionChunk.model_validate(json.loads(frame[6:]), strict=True)
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        text += delta.content or ""
        for call in delta.tool_calls or []:
            entry = calls.setdefault(call.index, ["", "", ""])
            entry[0] += call.id or ""
            entry[1] += (call.function.name if call.function else None) or ""
            entry[2] += (call.function.arguments if call.function else None) or ""
        finish = chunk.choices[0].finish_reason or finish
    return text, [tuple(calls[i]) for i in sorted(calls)], finish  # type: ignore[misc]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "toxics", [{}, {"slice_bytes": 5}, {"slice_bytes": 97, "slice_random": True}]
)
def test_recording_through_relay(stack: Stack, name: str, toxics: dict[str, Any]) -> None:
    request = recordings.load_request(recordings.request_path(name))
    stream = recordings.stream_path(name)
    sse = stream.read_text(encoding="utf-8")
    # The recorded stream belongs to another request; replay it without re-validating input.
    stack.script({"raw_sse_file": str(stream), "validate": False, "toxics": toxics})
    resp = requests.post(
        f"{stack.base_url}/chat/completions", json=request, headers=stack.headers(), timeout=30
    )
    assert resp.status_code == 200, resp.text
    frames = [f for f in resp.text.split("\n\n") if f and not f.startswith(":")]
    assert frames[-1] == "data: [DONE]"
    text, calls, finish = collect(frames[:-1])
    want_text, want_calls = recorded_output(sse)
    assert text == want_text
    assert calls == want_calls
    assert finish == ("tool_calls" if want_calls else "stop")
    # What Cursor sent reached upstream translated: no temperature for gpt-5, tools flat.
    upstream = stack.fake.requests[-1].body
    assert "temperature" not in upstream
    assert upstream["model"] == request["model"]
    for tool in upstream.get("tools", []):
        assert tool["type"] == "function" and "function" not in tool
