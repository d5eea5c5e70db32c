"""Real Cursor requests and real OpenAI streams, through the relay end to end.

The fake replays each recorded upstream stream byte for byte, whole and re-chunked; the
client must get the recorded text and tool calls in a strictly valid chunk stream.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import requests
from openai.types.chat import ChatCompletionChunk

from tests.support.stack import Stack

RECORDINGS = (
    Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "cursor-recordings"
)
NAMES = sorted(p.name for p in RECORDINGS.iterdir() if (p / "cursor_request.json").exists())


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
    folder = RECORDINGS / name
    request = json.loads((folder / "cursor_request.json").read_text())
    sse = (folder / "upstream_response.sse").read_text()
    # The recorded stream belongs to another request; replay it without re-validating input.
    stack.script(
        {"raw_sse_file": str(folder / "upstream_response.sse"), "validate": False, "toxics": toxics}
    )
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
