"""Real recorded traffic (Cursor requests, OpenAI Responses streams) through translation,
the SSE parser and the stream converter.

The recordings were redacted by their author: final texts read "REDACTED" where the
streamed deltas carry the real words, so streamed text is compared with the raw deltas and
with the final response wherever the latter was not redacted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from relay.core.responses_events import decode
from relay.settings.model_alias import ModelAlias
from relay.translate.request import translate_request
from relay.translate.responses_to_chat import response_to_chat_completion, usage_to_chat
from relay.translate.stream_converter import ChatStreamConverter, Chunk
from relay.transport.sse import SSEParser, decode_event
from tests.support import recordings

FOLDERS = recordings.folders()
GPT5 = ModelAlias("gpt-5", "gpt-5")
REDACTED = "REDACTED"


def test_all_six_recordings_are_present() -> None:
    assert [p.name for p in FOLDERS] == [
        "context_parallel_tool_call", "context_single_tool_calls", "default_recording",
        "empty_tools", "one_ping_pong", "reply_single_tool_call",
    ]  # fmt: skip


def request_of(folder: Path) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((folder / "cursor_request.json").read_text("utf-8"))
    return body


def raw_events(folder: Path) -> list[dict[str, Any]]:
    """The stream's events read the simplest possible way (independent of the parser)."""
    text = (folder / "upstream_response.sse").read_text(encoding="utf-8")
    events = []
    for block in text.split("\n\n"):
        data = [line[len("data: ") :] for line in block.split("\n") if line.startswith("data: ")]
        if data:
            events.append(json.loads("\n".join(data)))
    return events


def convert(folder: Path, *, summaries: bool) -> tuple[ChatStreamConverter, list[Chunk]]:
    conv = ChatStreamConverter(completion_id="chatcmpl-rec", created=1758093802, model="gpt-5",
                               include_usage=True, reasoning_summaries=summaries)  # fmt: skip
    parser = SSEParser(max_event_bytes=8 * 1024 * 1024)
    events = parser.feed((folder / "upstream_response.sse").read_bytes()) + parser.close()
    chunks: list[Chunk] = []
    for event in events:
        assert not conv.finished, "no events after the terminal one in these recordings"
        chunks += conv.feed(decode(*decode_event(event)))
    return conv, chunks


def assembled(chunks: list[Chunk]) -> dict[str, Any]:
    """What a Chat client rebuilds from the chunks."""
    out: dict[str, Any] = {"content": "", "reasoning_content": "", "tool_calls": {}}
    for chunk in chunks:
        for choice in chunk["choices"]:
            delta = choice["delta"]
            out["content"] += delta.get("content") or ""
            out["reasoning_content"] += delta.get("reasoning_content") or ""
            for call in delta.get("tool_calls") or []:
                slot = out["tool_calls"].setdefault(call["index"], {"arguments": ""})
                if "id" in call:
                    assert "id" not in slot, "id only in a call's first delta"
                    slot.update(id=call["id"], name=call["function"]["name"])
                slot["arguments"] += call["function"].get("arguments") or ""
    return out


# --- request side ----------------------------------------------------------------------------


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_cursor_request_translates(folder: Path) -> None:
    body = request_of(folder)
    result = translate_request(body, GPT5, reasoning_summaries=False)
    out = result.upstream_body
    assert (result.stream, result.include_usage, result.shape) == (True, False, "chat")
    assert result.caller == body["user"]
    assert result.client_model == "gpt-5"
    assert out["model"] == "gpt-5"
    assert "temperature" not in out  # Cursor's temperature 0 would be rejected by gpt-5
    assert out["reasoning"] == {"effort": body["reasoning"]["effort"]}
    messages = body["messages"]
    assert messages[0]["role"] == "system"
    assert out["instructions"] == messages[0]["content"]
    if body["tools"]:
        assert out["tool_choice"] == "auto"
        assert out["tools"] == [
            {"type": "function", "name": t["function"]["name"],
             "description": t["function"]["description"],
             "parameters": t["function"]["parameters"], "strict": False}
            for t in body["tools"]
        ]  # fmt: skip
    else:
        assert "tools" not in out
        assert "tool_choice" not in out
    items = out["input"]
    # every assistant tool call → a function_call with its id and untouched arguments
    sent_calls = [
        (c["id"], c["function"]["name"], c["function"]["arguments"])
        for m in messages
        if m["role"] == "assistant"
        for c in m.get("tool_calls") or []
    ]
    assert [
        (i["call_id"], i["name"], i["arguments"]) for i in items if i.get("type") == "function_call"
    ] == sent_calls
    # every tool message → a function_call_output with the right call id and content
    outputs = [(i["call_id"], i["output"]) for i in items
               if i.get("type") == "function_call_output"]  # fmt: skip
    assert outputs == [(m["tool_call_id"], m["content"]) for m in messages if m["role"] == "tool"]
    # order and count: one item per user/tool message, per assistant text, per tool call
    kinds = []
    for m in messages[1:]:
        if m["role"] == "assistant":
            kinds += ["assistant"] * bool(m.get("content"))
            kinds += ["call"] * len(m.get("tool_calls") or [])
        else:
            kinds.append(m["role"])
    names = {"function_call": "call", "function_call_output": "tool"}
    assert [names.get(i.get("type"), i.get("role")) for i in items] == kinds  # fmt: skip


# --- response side ----------------------------------------------------------------------------


@pytest.mark.parametrize("summaries", [False, True])
@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_upstream_stream_converts(folder: Path, summaries: bool) -> None:
    conv, chunks = convert(folder, summaries=summaries)
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk, strict=True)
    raw = raw_events(folder)
    final = raw[-1]["response"]
    assert raw[-1]["type"] == "response.completed"
    assert conv.finished
    assert conv.final_response == final

    calls = [i for i in final["output"] if i["type"] == "function_call"]
    expected_finish = "tool_calls" if calls else "stop"
    assert conv.finish_reason == expected_finish
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-2]["choices"][0]["finish_reason"] == expected_finish
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-2]] == [None] * (len(chunks) - 2)
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == usage_to_chat(final["usage"])
    assert all(c["usage"] is None for c in chunks[:-1])

    got = assembled(chunks)
    streamed_text = "".join(e["delta"] for e in raw if e["type"] == "response.output_text.delta")
    assert got["content"] == streamed_text
    final_text = "".join(p["text"] for i in final["output"] if i["type"] == "message"
                         for p in i["content"])  # fmt: skip
    assert final_text in (streamed_text, REDACTED)
    assert [got["tool_calls"][k] for k in sorted(got["tool_calls"])] == [
        {"id": c["call_id"], "name": c["name"], "arguments": c["arguments"]} for c in calls
    ]
    summary_parts: dict[tuple[int, int], str] = {}
    for e in raw:
        if e["type"] == "response.reasoning_summary_text.delta":
            key = (e["output_index"], e["summary_index"])
            summary_parts[key] = summary_parts.get(key, "") + e["delta"]
    expected_reasoning = "\n\n".join(summary_parts.values()) if summaries else ""
    assert got["reasoning_content"] == expected_reasoning

    # The openai SDK's own stream accumulator rebuilds the same answer.
    state = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk, strict=True))
    rebuilt = state.get_final_completion()
    assert rebuilt.choices[0].finish_reason == expected_finish
    assert (rebuilt.choices[0].message.content or "") == streamed_text
    assert [(t.id, t.function.name, t.function.arguments)
            for t in rebuilt.choices[0].message.tool_calls or []] == [
        (c["call_id"], c["name"], c["arguments"]) for c in calls]  # fmt: skip
    assert rebuilt.usage is not None
    assert rebuilt.usage.total_tokens == final["usage"]["total_tokens"]


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_final_response_converts_to_a_valid_chat_completion(folder: Path) -> None:
    final = raw_events(folder)[-1]["response"]
    completion = response_to_chat_completion(final, completion_id="chatcmpl-rec", created=1,
                                             model="gpt-5", reasoning_summaries=True)  # fmt: skip
    ChatCompletion.model_validate(completion, strict=True)
    (choice,) = completion["choices"]
    calls = [i for i in final["output"] if i["type"] == "function_call"]
    assert choice["finish_reason"] == ("tool_calls" if calls else "stop")
    got_calls = choice["message"].get("tool_calls", [])
    assert [
        (c["id"], c["function"]["arguments"] if c["type"] == "function" else None)
        for c in got_calls
    ] == [(c["call_id"], c["arguments"]) for c in calls]
    assert completion["usage"]["total_tokens"] == final["usage"]["total_tokens"]
