"""FakeUpstream.answer_chat without a socket: the chat.completion, its chunks, scripts.

Every JSON body and chunk is validated strictly against the SDK's own types.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from fakeupstream.chat_reply import chat_frame, reasoning_text
from fakeupstream.fake import FakeUpstream
from fakeupstream.scripts import Message, Reasoning, parse_script
from fakeupstream.strict_chat import Strictness

TOOLS = [
    {"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}},
]
USER = {"role": "user", "content": "hello"}


def new_fake(**kw: Any) -> FakeUpstream:
    return FakeUpstream(seed=5, secret=b"q" * 32, **kw)


def ask(
    fake: FakeUpstream, messages: list[Any], script: dict[str, Any] | None = None, **body: Any
) -> tuple[int, list[Any], dict[str, Any]]:
    request = {"model": "deepseek-reasoner", "messages": messages, **body}
    answer, report = fake.answer_chat(request, parse_script(script or {}))
    return answer.status, answer.parsed, report


def message_of(
    fake: FakeUpstream, messages: list[Any], script: dict[str, Any] | None = None, **body: Any
) -> dict[str, Any]:
    status, parsed, _ = ask(fake, messages, script, **body)
    assert status == 200, parsed
    completion = ChatCompletion.model_validate(parsed[0], strict=True)
    assert completion.object == "chat.completion"
    message: dict[str, Any] = parsed[0]["choices"][0]["message"]
    return message


def chunks_of(parsed: list[Any]) -> list[dict[str, Any]]:
    assert parsed[-1] == "[DONE]"
    for chunk in parsed[:-1]:
        ChatCompletionChunk.model_validate(chunk, strict=True)
    return parsed[:-1]


def assemble(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """A streamed answer as one message, as a client would accumulate it."""
    message: dict[str, Any] = {"role": "assistant", "content": None, "reasoning_content": ""}
    calls: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            delta = choice["delta"]
            message["reasoning_content"] += delta.get("reasoning_content") or ""
            if delta.get("content") is not None:
                message["content"] = (message["content"] or "") + delta["content"]
            for call in delta.get("tool_calls") or []:
                slot = calls.setdefault(
                    call["index"], {"type": "function", "function": {"arguments": ""}}
                )
                if "id" in call:
                    slot["id"] = call["id"]
                    slot["function"]["name"] = call["function"]["name"]
                slot["function"]["arguments"] += call["function"]["arguments"]
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


# --- default replies ------------------------------------------------------------------


def test_default_reply_echoes_with_signed_reasoning_and_the_probe_line():
    fake = new_fake()
    status, parsed, report = ask(fake, [USER])
    assert status == 200
    completion = ChatCompletion.model_validate(parsed[0], strict=True)
    choice = parsed[0]["choices"][0]
    assert choice["finish_reason"] == "stop"
    message = choice["message"]
    assert message["content"] == "Echo: hello\ncontinuity: restored=0 exact=0 wrong=0 missing=0"
    assert message["reasoning_content"].startswith("Thinking about: hello #")
    assert "tool_calls" not in message
    assert completion.usage is not None
    assert completion.usage.completion_tokens_details is not None
    reasoning_tokens = completion.usage.completion_tokens_details.reasoning_tokens
    assert reasoning_tokens is not None
    assert reasoning_tokens > 0
    assert report == {"restored": 0, "exact": 0, "wrong": 0, "missing": 0, "items": []}


def test_call_tool_calls_the_first_function_tool():
    message = message_of(new_fake(), [{"role": "user", "content": "CALL_TOOL now"}], tools=TOOLS)
    assert message["content"] is None
    assert message["reasoning_content"].startswith("Thinking about: CALL_TOOL now #")
    [call] = message["tool_calls"]
    assert call["function"] == {"name": "read", "arguments": "{}"}
    assert call["id"].startswith("call_")


def test_call_tool_without_tools_is_just_text():
    message = message_of(new_fake(), [{"role": "user", "content": "CALL_TOOL"}])
    assert message["content"].startswith("Echo: CALL_TOOL\n")


@pytest.mark.parametrize(
    ("choice", "name"),
    [("required", "read"), ({"type": "function", "function": {"name": "grep"}}, "grep")],
)
def test_a_forced_tool_choice_calls(choice, name):
    message = message_of(new_fake(), [USER], tools=TOOLS, tool_choice=choice)
    assert message["tool_calls"][0]["function"]["name"] == name


def test_after_a_tool_result_it_reports_the_output_and_continuity():
    fake = new_fake()
    first = message_of(fake, [{"role": "user", "content": "CALL_TOOL"}], tools=TOOLS)
    tool = {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"], "content": "42"}
    history = [{"role": "user", "content": "CALL_TOOL"}, first, tool]
    status, parsed, report = ask(fake, history, tools=TOOLS)
    assert status == 200
    content = parsed[0]["choices"][0]["message"]["content"]
    assert content == "Tool output: 42\ncontinuity: restored=1 exact=1 wrong=0 missing=0"
    assert report["items"] == [{"index": 1, "state": "exact", "tool_calls": 1}]


# --- streaming ------------------------------------------------------------------------


def test_stream_sends_reasoning_before_content_then_finish_and_done():
    fake = new_fake()
    status, parsed, _ = ask(fake, [USER], stream=True)
    assert status == 200
    chunks = chunks_of(parsed)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": None, "reasoning_content": ""}
    kinds = "".join(
        "r" if d.get("reasoning_content") else "c" if d.get("content") else "-" for d in deltas
    )
    assert re.fullmatch(r"-r+c+-", kinds), kinds  # role, reasoning pieces, content, finish
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert len({c["id"] for c in chunks}) == 1
    assert all("usage" not in c for c in chunks)
    whole = assemble(chunks)
    assert whole["content"].startswith("Echo: hello\ncontinuity:")
    assert whole["reasoning_content"].startswith("Thinking about: hello #")


def test_stream_tool_calls_are_indexed_with_id_and_name_first():
    script = {
        "output": [
            {"type": "reasoning", "text": "Two reads."},
            {"type": "function_call", "name": "read", "arguments": '{"path": "a.txt"}'},
            {"type": "function_call", "name": "grep", "arguments": "{}", "call_id": "call_x"},
        ],
        "delta_size": 4,
    }
    _, parsed, _ = ask(new_fake(), [USER], script, tools=TOOLS, stream=True)
    chunks = chunks_of(parsed)
    calls = [d for c in chunks for d in c["choices"][0]["delta"].get("tool_calls") or []]
    firsts = [c for c in calls if "id" in c]
    assert firsts == [
        {
            "index": 0,
            "id": firsts[0]["id"],
            "type": "function",
            "function": {"name": "read", "arguments": ""},
        },
        {
            "index": 1,
            "id": "call_x",
            "type": "function",
            "function": {"name": "grep", "arguments": ""},
        },
    ]
    pieces = [c["function"]["arguments"] for c in calls if c["index"] == 0 and "id" not in c]
    assert pieces == ['{"pa', 'th":', ' "a.', 'txt"', "}"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    whole = assemble(chunks)
    assert whole["reasoning_content"].startswith("Two reads. #")
    assert [c["function"]["name"] for c in whole["tool_calls"]] == ["read", "grep"]


def test_stream_with_include_usage_ends_with_a_usage_chunk():
    _, parsed, _ = ask(new_fake(), [USER], stream=True, stream_options={"include_usage": True})
    chunks = chunks_of(parsed)
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == []
    usage = chunks[-1]["usage"]
    assert usage["completion_tokens_details"]["reasoning_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_frames_are_data_lines_only():
    assert chat_frame({"a": 1}) == b'data: {"a":1}\n\n'
    assert chat_frame("[DONE]") == b"data: [DONE]\n\n"


def test_json_and_stream_carry_the_same_answer():
    script = {
        "output": [
            {"type": "reasoning", "text": "Hm."},
            {"type": "message", "text": "Hi there, you."},
        ]
    }
    json_message = message_of(new_fake(), [USER], script)
    _, parsed, _ = ask(new_fake(), [USER], script, stream=True)
    streamed = assemble(chunks_of(parsed))
    assert streamed["content"] == json_message["content"] == "Hi there, you."
    assert streamed["reasoning_content"] == json_message["reasoning_content"]  # same seed


# --- scripts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "finish"),
    [
        ({}, "stop"),
        ({"output": [{"type": "function_call", "name": "read"}]}, "tool_calls"),
        ({"status": "incomplete"}, "length"),
        ({"status": "incomplete", "incomplete_reason": "content_filter"}, "content_filter"),
    ],
)
def test_finish_reasons(script, finish):
    _, parsed, _ = ask(new_fake(), [USER], script, tools=TOOLS)
    assert parsed[0]["choices"][0]["finish_reason"] == finish
    _, parsed, _ = ask(new_fake(), [USER], script, tools=TOOLS, stream=True)
    assert chunks_of(parsed)[-1]["choices"][0]["finish_reason"] == finish


def test_scripted_output_refusal_and_usage():
    script = {
        "output": [
            {"type": "reasoning", "summary": ["one", "two"]},
            {"type": "message", "text": "A "},
            {"type": "message", "text": "B"},
            {"type": "refusal", "text": "No."},
        ],
        "usage": {"input_tokens": 7, "output_tokens": 9, "reasoning_tokens": 3, "cached_tokens": 2},
    }
    _, parsed, _ = ask(new_fake(), [USER], script)
    ChatCompletion.model_validate(parsed[0], strict=True)
    message = parsed[0]["choices"][0]["message"]
    assert message["content"] == "A B"
    assert message["refusal"] == "No."
    assert message["reasoning_content"].startswith("one\n\ntwo #")
    assert parsed[0]["usage"] == {
        "prompt_tokens": 7,
        "completion_tokens": 9,
        "total_tokens": 16,
        "prompt_tokens_details": {"cached_tokens": 2},
        "completion_tokens_details": {"reasoning_tokens": 3},
        "prompt_cache_hit_tokens": 2,
        "prompt_cache_miss_tokens": 5,
    }


def test_reasoning_text_choice():
    assert reasoning_text([Message("x")], "default") == "default"
    assert reasoning_text([Reasoning()], "default") == "default"
    assert reasoning_text([Reasoning(("a",)), Reasoning((), "b")], "d") == "a\n\nb"
    assert reasoning_text([Reasoning((), "")], "d") == ""


def test_empty_reasoning_is_sent_as_empty_and_accepted_back():
    fake = new_fake()
    script = {
        "output": [{"type": "reasoning", "text": ""}, {"type": "function_call", "name": "read"}]
    }
    first = message_of(fake, [USER], script, tools=TOOLS)
    assert first["reasoning_content"] == ""
    tool = {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"], "content": "ok"}
    status, _, report = ask(fake, [USER, first, tool], tools=TOOLS)
    assert status == 200
    assert report["exact"] == 1
    # The same "" on a message minted with text is rejected.
    second = message_of(fake, [{"role": "user", "content": "CALL_TOOL"}], tools=TOOLS)
    emptied = {**second, "reasoning_content": ""}
    status, _, report = ask(
        fake, [USER, emptied, {**tool, "tool_call_id": second["tool_calls"][0]["id"]}], tools=TOOLS
    )
    assert status == 400
    assert report["wrong"] == 1


@pytest.mark.parametrize("stream", [False, True])
def test_failed_generation_ends_with_an_error(stream):
    script = {"status": "failed", "error": {"code": "server_error", "message": "boom"}}
    status, parsed, _ = ask(new_fake(), [USER], script, stream=stream)
    error = {
        "error": {"message": "boom", "type": "server_error", "param": None, "code": "server_error"}
    }
    if not stream:
        assert (status, parsed) == (500, [error])
        return
    assert status == 200
    assert parsed[-1] == error
    assert "[DONE]" not in parsed
    assert all(c["choices"][0]["finish_reason"] is None for c in parsed[:-1])


def test_error_event_after_some_chunks():
    script = {"error_event": {"message": "overloaded", "code": "server_error", "after_events": 2}}
    status, parsed, _ = ask(new_fake(), [USER], script, stream=True)
    assert status == 200
    assert len(parsed) == 3
    assert parsed[-1]["error"]["message"] == "overloaded"


def test_http_error_wins_over_everything():
    script = {
        "http_error": {
            "status": 429,
            "message": "Slow down.",
            "type": "rate_limit_error",
            "headers": {"retry-after": "2"},
        }
    }
    fake = new_fake()
    answer, report = fake.answer_chat(
        {
            "model": "m",
            "messages": [
                USER,
                {
                    "role": "assistant",
                    "content": "x",
                    "tool_calls": [
                        {
                            "id": "c",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
            ],
        },
        parse_script(script),
    )
    assert answer.status == 429
    assert answer.parsed == [
        {
            "error": {
                "message": "Slow down.",
                "type": "rate_limit_error",
                "param": None,
                "code": None,
            }
        }
    ]
    assert answer.headers == (("retry-after", "2"),)
    assert report["missing"] == 1


def test_raw_sse_is_replayed():
    raw = 'data: {"x": 1}\n\ndata: [DONE]\n\n'
    answer, _ = new_fake().answer_chat(
        {"model": "m", "messages": [USER]}, parse_script({"raw_sse": raw})
    )
    assert answer.stream
    assert answer.frames == [b'data: {"x": 1}\n\n', b"data: [DONE]\n\n"]


# --- strictness and validation -----------------------------------------------------------

MISSING_TOOL_TURN = [
    USER,
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "ok"},
]


def test_instance_and_script_strictness():
    fake = new_fake(strict="kimi")
    status, parsed, report = ask(fake, MISSING_TOOL_TURN, tools=TOOLS)
    assert status == 400
    assert parsed[0]["error"]["message"].endswith("tool call message at index 1")
    assert report["missing"] == 1
    status, parsed, _ = ask(
        fake, MISSING_TOOL_TURN, {"strict": {"rule": "tool_turns", "prefix": True}}, tools=TOOLS
    )
    assert (
        parsed[0]["error"]["message"]
        == "Param Incorrect: The reasoning_content in the thinking mode must be passed back to the API."
    )
    assert ask(fake, MISSING_TOOL_TURN, {"strict": "off"}, tools=TOOLS)[0] == 200
    assert ask(fake, MISSING_TOOL_TURN, {"validate": False}, tools=TOOLS)[0] == 200
    fake.chat.strictness = Strictness("off")
    assert ask(fake, MISSING_TOOL_TURN, tools=TOOLS)[0] == 200
    fake.reset()
    assert fake.chat.strictness == Strictness("kimi")


def test_default_strictness_is_tool_turns():
    fake = new_fake()
    assert fake.chat.strictness == Strictness("tool_turns", False)
    status, parsed, _ = ask(fake, MISSING_TOOL_TURN, tools=TOOLS)
    assert status == 400
    assert parsed[0] == {
        "error": {
            "message": "The reasoning_content in the thinking mode must be passed back to the API.",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"messages": [USER]}, "Missing required parameter: 'model'."),
        ({"model": "m"}, "Missing required parameter: 'messages'."),
        ({"model": 1, "messages": [USER]}, "Invalid type for 'model': expected a string, but got a number instead."),
        ({"model": "m", "messages": "hi"}, "Invalid type for 'messages': expected an array, but got a string instead."),
        ({"model": "m", "messages": []}, "Invalid 'messages': empty array."),
        ({"model": "m", "messages": ["hi"]}, "Invalid type for 'messages[0]': expected an object"),
        ({"model": "m", "messages": [{"content": "x"}]}, "Missing required parameter: 'messages[0].role'."),
        ({"model": "m", "messages": [{"role": "bot"}]}, "Invalid value: 'bot'. Supported values are: 'system', 'developer', 'user', 'assistant', and 'tool'."),
        ({"model": "m", "messages": [USER], "stream": "yes"}, "Invalid type for 'stream': expected a boolean"),
        ({"model": "m", "messages": [USER], "tools": {}}, "Invalid type for 'tools': expected an array"),
    ],
)  # fmt: skip
def test_request_shape_errors(body, message):
    answer, _ = new_fake().answer_chat(body, parse_script({}))
    assert answer.status == 400
    assert answer.parsed[0]["error"]["message"].startswith(message)


def test_the_json_body_is_indented_like_openai():
    _, parsed, _ = ask(new_fake(), [USER])
    answer, _ = new_fake().answer_chat(
        {"model": "deepseek-reasoner", "messages": [USER]}, parse_script({})
    )
    assert answer.frames[0] == json.dumps(parsed[0], indent=2).encode()
