"""The official openai SDK, with strict response validation, as a real client of the relay."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tests.support.stack import Stack

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


def stream_chunks(stack: Stack, **kwargs: object) -> list[ChatCompletionChunk]:
    client = stack.openai()
    with client.chat.completions.create(stream=True, **kwargs) as stream:
        return list(stream)


def joined_text(chunks: list[ChatCompletionChunk]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_json_text_answer(stack: Stack) -> None:
    stack.script(
        {
            "output": [
                {"type": "reasoning", "summary": ["plan"]},
                {"type": "message", "text": "Hello there"},
            ]
        }
    )
    completion = stack.openai().chat.completions.create(
        model="gpt-5", messages=[{"role": "user", "content": "hi"}], temperature=0
    )
    assert isinstance(completion, ChatCompletion)
    assert completion.object == "chat.completion"
    assert completion.model == "gpt-5"
    assert completion.choices[0].message.content == "Hello there"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.total_tokens > 0
    upstream = stack.fake.requests[-1].body
    assert "temperature" not in upstream  # gpt-5 rejects 0; the relay must not forward it
    assert upstream["stream"] is True


def test_stream_text_answer_with_usage(stack: Stack) -> None:
    stack.script({"output": [{"type": "message", "text": "abcdefghij"}], "delta_size": 2})
    chunks = stream_chunks(
        stack,
        model="gpt-4.1",
        messages=[{"role": "user", "content": "hi"}],
        temperature=0.5,
        stream_options={"include_usage": True},
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert joined_text(chunks) == "abcdefghij"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert all(c.usage is None for c in chunks[:-1])
    assert stack.fake.requests[-1].body["temperature"] == 0.5  # accepted by non-reasoning models


def test_preamble_and_answer_stay_in_one_choice(stack: Stack) -> None:
    stack.script(
        {
            "output": [
                {"type": "message", "text": "Let me check. ", "phase": "commentary"},
                {"type": "message", "text": "Done."},
            ]
        }
    )
    chunks = stream_chunks(stack, model="gpt-5", messages=[{"role": "user", "content": "x"}])
    assert {c.choices[0].index for c in chunks if c.choices} == {0}
    assert joined_text(chunks) == "Let me check. Done."


@pytest.mark.parametrize("stream", [False, True])
def test_parallel_tool_calls(stack: Stack, stream: bool) -> None:
    script = {
        "output": [
            {"type": "reasoning", "summary": []},
            {
                "type": "function_call",
                "name": "read_file",
                "arguments": '{"path":"a"}',
                "call_id": "call_a",
            },
            {
                "type": "function_call",
                "name": "read_file",
                "arguments": '{"path":"b"}',
                "call_id": "call_b",
            },
        ],
        "delta_size": 3,
    }
    stack.script(script)
    kwargs = {"model": "gpt-5", "messages": [{"role": "user", "content": "read"}], "tools": TOOLS}
    if stream:
        chunks = stream_chunks(stack, **kwargs)
        calls: dict[int, dict[str, str]] = {}
        for chunk in chunks:
            for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                entry = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                if delta.id:
                    assert entry["id"] == "", "id only in a call's first delta"
                    entry["id"] = delta.id
                if delta.function and delta.function.name:
                    entry["name"] += delta.function.name
                if delta.function and delta.function.arguments:
                    entry["arguments"] += delta.function.arguments
        finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        got = [calls[i] for i in sorted(calls)]
    else:
        completion = stack.openai().chat.completions.create(**kwargs)
        finish = completion.choices[0].finish_reason
        got = [
            {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
            for c in completion.choices[0].message.tool_calls
        ]
    assert finish == "tool_calls"
    assert got == [
        {"id": "call_a", "name": "read_file", "arguments": '{"path":"a"}'},
        {"id": "call_b", "name": "read_file", "arguments": '{"path":"b"}'},
    ]
    sent_tools = stack.fake.requests[-1].body["tools"]
    assert sent_tools[0]["name"] == "read_file" and sent_tools[0]["type"] == "function"


def test_tool_results_round_trip(stack: Stack) -> None:
    """A full tool turn: the history call and its output reach upstream as paired items."""
    messages = [
        {"role": "user", "content": "read a"},
        {
            "role": "assistant",
            "content": "Reading.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "index": 0,
                    "function": {"name": "read_file", "arguments": '{"path": "a"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "name": "read_file", "content": "contents"},
    ]
    completion = stack.openai().chat.completions.create(
        model="gpt-5", messages=messages, tools=TOOLS
    )
    assert "Tool output: contents" in (completion.choices[0].message.content or "")
    items = stack.fake.requests[-1].body["input"]
    kinds = [i.get("type", "message") for i in items]
    assert kinds == ["message", "message", "function_call", "function_call_output"]
    assert items[2]["arguments"] == '{"path": "a"}'  # opaque, untouched


def test_image_parts_reach_upstream(stack: Stack) -> None:
    url = "data:image/png;base64,iVBORw0KGgo="
    stack.openai().chat.completions.create(
        model="gpt-5",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this"},
                    {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
                ],
            }
        ],
    )
    content = stack.fake.requests[-1].body["input"][0]["content"]
    assert content == [
        {"type": "input_text", "text": "what is this"},
        {"type": "input_image", "image_url": url, "detail": "low"},
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_refusal_stays_visible(stack: Stack, stream: bool) -> None:
    stack.script({"output": [{"type": "refusal", "text": "I can't help with that."}]})
    kwargs = {"model": "gpt-5", "messages": [{"role": "user", "content": "x"}]}
    if stream:
        chunks = stream_chunks(stack, **kwargs)
        refusal = "".join(c.choices[0].delta.refusal or "" for c in chunks if c.choices)
    else:
        msg = stack.openai().chat.completions.create(**kwargs).choices[0].message
        refusal = msg.refusal or ""
    assert refusal == "I can't help with that."


@pytest.mark.parametrize(
    ("reason", "finish"), [("max_output_tokens", "length"), ("content_filter", "content_filter")]
)
@pytest.mark.parametrize("stream", [False, True])
def test_incomplete_maps_finish_reason(
    stack: Stack, reason: str, finish: str, stream: bool
) -> None:
    stack.script(
        {
            "output": [{"type": "message", "text": "partial"}],
            "status": "incomplete",
            "incomplete_reason": reason,
        }
    )
    kwargs = {"model": "gpt-5", "messages": [{"role": "user", "content": "x"}], "max_tokens": 5}
    if stream:
        chunks = stream_chunks(stack, **kwargs)
        got = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
    else:
        got = stack.openai().chat.completions.create(**kwargs).choices[0].finish_reason
    assert got == finish
    assert stack.fake.requests[-1].body["max_output_tokens"] == 5


def test_failed_generation_is_an_error_not_an_empty_answer(stack: Stack) -> None:
    script = {
        "status": "failed",
        "error": {"code": "server_error", "message": "The model crashed."},
    }
    stack.script(script)
    with pytest.raises(openai.APIStatusError) as info:
        stack.openai().chat.completions.create(
            model="gpt-5", messages=[{"role": "user", "content": "x"}]
        )
    assert info.value.status_code == 502
    assert "The model crashed." in info.value.message
    stack.script(script)
    with pytest.raises(openai.APIError, match=r"The model crashed\."):
        stream_chunks(stack, model="gpt-5", messages=[{"role": "user", "content": "x"}])


def test_error_event_mid_stream(stack: Stack) -> None:
    stack.script(
        {
            "output": [{"type": "message", "text": "hello world"}],
            "error_event": {"code": "server_error", "message": "overloaded", "after_events": 4},
        }
    )
    with pytest.raises(openai.APIError, match="overloaded"):
        stream_chunks(stack, model="gpt-5", messages=[{"role": "user", "content": "x"}])


@pytest.mark.parametrize(
    ("status", "exc"),
    [
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_upstream_http_errors_keep_status_and_envelope(
    stack: Stack, status: int, exc: type[Exception], stream: bool
) -> None:
    stack.script(
        {
            "http_error": {
                "status": status,
                "type": "invalid_request_error",
                "message": f"upstream said {status}",
                "code": "some_code",
            }
        }
    )
    kwargs = {"model": "gpt-5", "messages": [{"role": "user", "content": "x"}]}
    with pytest.raises(exc) as info:
        if stream:
            stream_chunks(stack, **kwargs)
        else:
            stack.openai().chat.completions.create(**kwargs)
    err = info.value
    assert isinstance(err, openai.APIStatusError)
    assert err.status_code == status
    assert err.body == {
        "message": f"upstream said {status}",
        "type": "invalid_request_error",
        "param": None,
        "code": "some_code",
    }


def test_relay_answers_validate_strictly_as_raw_json(stack: Stack) -> None:
    """Beyond the SDK: every raw frame parses as a ChatCompletionChunk, and [DONE] ends it."""
    import requests

    stack.script(
        {"output": [{"type": "reasoning", "summary": ["s"]}, {"type": "message", "text": "ok"}]}
    )
    body: dict[str, Any] = {
        "model": "gpt-5",
        "messages": [{"role": "user", "content": "x"}],
        "stream": True,
    }
    resp = requests.post(
        f"{stack.base_url}/chat/completions", json=body, headers=stack.headers(), timeout=10
    )
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    frames = [f for f in resp.text.split("\n\n") if f]
    assert frames[-1] == "data: [DONE]"
    for frame in frames[:-1]:
        assert frame.startswith("data: ")
        ChatCompletionChunk.model_validate(json.loads(frame[6:]), strict=True)
