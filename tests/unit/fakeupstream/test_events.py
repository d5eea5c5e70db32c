"""fakeupstream.events: every scriptable behaviour, in both modes, is strictly valid for the SDK.

The judge is the official ``openai`` package: each SSE event must validate strictly as a
``ResponseStreamEvent`` and be accepted by the SDK's own stream accumulator; each JSON body
and terminal response must validate strictly as a ``Response``.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent

from fakeupstream.answers import Answer
from fakeupstream.events import split_text, sse_frame
from fakeupstream.fake import FakeUpstream
from fakeupstream.scripts import parse_script

EVENT = pydantic.TypeAdapter(ResponseStreamEvent)
TERMINAL = ("response.completed", "response.incomplete", "response.failed")
PATCH_GRAMMAR = {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch"'}
TOOLS = [
    {"type": "function", "name": "read_file", "parameters": {"type": "object"}, "strict": False},
    {"type": "function", "name": "grep", "description": "search", "parameters": {}},
    {"type": "custom", "name": "ApplyPatch", "format": PATCH_GRAMMAR},
    {"type": "custom", "name": "Shell", "description": "run", "format": {"type": "text"}},
]
PATCH = '*** Begin Patch\n+caf\u00e9 "q" \\ {not json}\n*** End Patch\n'
REQUEST = {
    "model": "gpt-5",
    "input": [{"role": "user", "content": "hello there"}],
    "instructions": "be brief",
    "tools": TOOLS,
    "tool_choice": "auto",
    "reasoning": {"effort": "low", "summary": "auto"},
    "include": ["reasoning.encrypted_content"],
    "store": False,
    "metadata": {"k": "v"},
    "prompt_cache_key": "pck",
    "safety_identifier": "user-1",
}

BEHAVIOURS: dict[str, dict[str, Any]] = {
    "default": {},
    "text": {"output": [{"type": "message", "text": "Just text."}]},
    "reasoning+text": {
        "output": [
            {"type": "reasoning", "summary": ["**Plan**\n\nfirst", "second"]},
            {"type": "message", "text": "Answer."},
        ]
    },
    "preamble+answer": {
        "output": [
            {"type": "reasoning", "summary": ["think"]},
            {"type": "message", "text": "Let me check.", "phase": "commentary"},
            {"type": "message", "text": "Done.", "phase": "final_answer"},
        ]
    },
    "one-call": {
        "output": [
            {"type": "reasoning", "summary": []},
            {"type": "function_call", "name": "read_file", "arguments": '{"path": "a.py"}'},
        ]
    },
    "parallel-calls": {
        "output": [
            {"type": "reasoning", "summary": ["s"]},
            {"type": "function_call", "name": "read_file", "arguments": "{}"},
            {"type": "function_call", "name": "grep", "arguments": '{"q": "x"}'},
        ]
    },
    "custom-call": {
        "output": [
            {"type": "reasoning", "summary": ["patch"]},
            {"type": "custom_tool_call", "name": "ApplyPatch", "input": PATCH},
        ]
    },
    "custom-and-function": {
        "output": [
            {"type": "reasoning", "summary": []},
            {"type": "message", "text": "Patching."},
            {"type": "custom_tool_call", "name": "ApplyPatch", "input": PATCH, "call_id": "call_p"},
            {"type": "function_call", "name": "grep", "arguments": "{}"},
        ]
    },
    "refusal": {"output": [{"type": "refusal", "text": "I can't help with that."}]},
    "incomplete-length": {
        "output": [{"type": "reasoning", "summary": ["s"]}, {"type": "message", "text": "cut"}],
        "status": "incomplete",
    },
    "incomplete-filter": {
        "output": [{"type": "message", "text": "bad"}],
        "status": "incomplete",
        "incomplete_reason": "content_filter",
    },
    "failed": {
        "output": [{"type": "reasoning", "summary": []}],
        "status": "failed",
        "error": {"code": "server_error", "message": "The model crashed."},
    },
    "300-deltas": {"output": [{"type": "message", "text": "x" * 300}], "delta_size": 1},
    "few-deltas": {"output": [{"type": "message", "text": "abcdefghij"}], "deltas": 3},
    "ciphertext-differ": {
        "output": [{"type": "reasoning", "summary": ["s"]}, {"type": "message", "text": "t"}],
        "ciphertext": "differ",
    },
    "ciphertext-completed-only": {
        "output": [{"type": "reasoning", "summary": ["s"]}, {"type": "message", "text": "t"}],
        "ciphertext": "completed_only",
    },
    "usage": {"usage": {"input_tokens": 100, "cached_tokens": 60, "cache_write_tokens": 7}},
    "error-event": {"error_event": {"code": "server_error", "message": "stream broke"}},
    "error-event-early": {"error_event": {"message": "overloaded", "after_events": 2}},
}


def answer(script: dict[str, Any], **overrides: Any) -> Answer:
    fake = FakeUpstream(seed=7, secret=b"x" * 32)
    body = {**REQUEST, **overrides}
    return fake.answer(body, "sk-test", parse_script(script))[0]


def parse_sse(frames: list[bytes]) -> list[dict[str, Any]]:
    events = []
    for frame in frames:
        assert frame.endswith(b"\n\n")
        event_line, data_line = frame.decode().rstrip("\n").split("\n")
        event = json.loads(data_line.removeprefix("data: "))
        assert event_line == f"event: {event['type']}"
        events.append(event)
    return events


def check_stream(events: list[dict[str, Any]]) -> None:
    """Strict SDK validation plus the ordering rules the SDK's stream helper relies on."""
    state = ResponseStreamState(input_tools=omit, text_format=omit)
    added: dict[int | None, dict[str, Any]] = {}
    for number, raw in enumerate(events):
        event = EVENT.validate_python(raw, strict=True)
        assert event.type == raw["type"]
        assert raw["sequence_number"] == number
        assert list(raw)[:2] == ["type", "sequence_number"]
        index = raw.get("output_index")
        if raw["type"] == "response.output_item.added":
            assert index not in added
            added[index] = raw["item"]
        elif index is not None:
            assert index in added, f"{raw['type']} before output_item.added"
        if raw["type"] == "response.output_item.done":
            assert (raw["item"]["id"], raw["item"]["type"]) == (
                added[index]["id"],
                added[index]["type"],
            )
        if raw["type"] in ("response.output_text.delta", "response.output_text.done"):
            assert raw["logprobs"] == []
        state.handle_event(event)
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    last = events[-1]
    assert last["type"] in (*TERMINAL, "error")
    assert all(e["type"] not in (*TERMINAL, "error") for e in events[:-1])
    if last["type"] != "error":
        Response.model_validate(last["response"], strict=True)


@pytest.mark.parametrize("name", BEHAVIOURS)
def test_stream_events_are_strictly_valid(name):
    result = answer(BEHAVIOURS[name], stream=True)
    assert result.status == 200
    events = parse_sse(result.frames)
    check_stream(events)


@pytest.mark.parametrize("name", [n for n in BEHAVIOURS if not n.startswith("error-event")])
def test_json_body_is_a_strictly_valid_response(name):
    result = answer(BEHAVIOURS[name])
    assert result.status == 200
    body = json.loads(result.frames[0])
    response = Response.model_validate(body, strict=True)
    assert response.model == "gpt-5"


def test_json_mode_error_event_is_a_500_envelope():
    result = answer(BEHAVIOURS["error-event"])
    assert result.status == 500
    assert json.loads(result.frames[0]) == {
        "error": {
            "message": "stream broke",
            "type": "server_error",
            "param": None,
            "code": "server_error",
        }
    }


def by_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def stream(name: str, **overrides: Any) -> list[dict[str, Any]]:
    return parse_sse(answer(BEHAVIOURS[name], stream=True, **overrides).frames)


def test_reasoning_summary_events_per_summary_index():
    events = stream("reasoning+text")
    parts = by_type(events, "response.reasoning_summary_part.added")
    assert [p["summary_index"] for p in parts] == [0, 1]
    texts = by_type(events, "response.reasoning_summary_text.done")
    assert [t["text"] for t in texts] == ["**Plan**\n\nfirst", "second"]
    done = by_type(events, "response.output_item.done")[0]["item"]
    assert list(done) == ["id", "type", "encrypted_content", "summary"]
    assert done["id"].startswith("rs_")
    assert done["encrypted_content"].startswith("gAAAAAB")


def test_summaries_only_when_requested_and_ciphertext_only_when_included():
    events = stream("reasoning+text", reasoning={"effort": "low"}, include=[])
    assert not by_type(events, "response.reasoning_summary_part.added")
    done = by_type(events, "response.output_item.done")[0]["item"]
    assert done == {"id": done["id"], "type": "reasoning", "summary": []}
    assert "encrypted_content" not in json.dumps(events)


def test_function_calls_have_ids_and_argument_deltas():
    events = stream("parallel-calls")
    calls = [e["item"] for e in by_type(events, "response.output_item.done")[1:]]
    assert [c["name"] for c in calls] == ["read_file", "grep"]
    assert all(c["id"].startswith("fc_") and c["call_id"].startswith("call_") for c in calls)
    assert len({c["call_id"] for c in calls}) == 2
    args = "".join(e["delta"] for e in by_type(events, "response.function_call_arguments.delta"))
    assert args == "{}" + '{"q": "x"}'


def test_custom_tool_calls_stream_their_input_as_custom_tool_call_input_events():
    events = stream("custom-and-function")
    added = by_type(events, "response.output_item.added")[2]
    assert added["item"]["type"] == "custom_tool_call" and added["item"]["input"] == ""
    deltas = by_type(events, "response.custom_tool_call_input.delta")
    assert {d["output_index"] for d in deltas} == {2}
    assert all(d["item_id"] == added["item"]["id"] for d in deltas)
    assert "".join(d["delta"] for d in deltas) == PATCH
    (done_event,) = by_type(events, "response.custom_tool_call_input.done")
    assert (done_event["input"], done_event["output_index"]) == (PATCH, 2)
    done = by_type(events, "response.output_item.done")[2]["item"]
    assert done == {
        "id": added["item"]["id"], "type": "custom_tool_call", "call_id": "call_p",
        "input": PATCH, "name": "ApplyPatch",
    }  # fmt: skip
    assert done["id"].startswith("ctc_")
    final = by_type(events, "response.completed")[0]["response"]
    assert [item["type"] for item in final["output"]] == [
        "reasoning", "message", "custom_tool_call", "function_call",
    ]  # fmt: skip
    assert final["output"][2] == done
    assert final["tools"][2] == TOOLS[2]  # custom tools are echoed as sent


def test_refusal_uses_refusal_parts_and_events():
    events = stream("refusal")
    assert by_type(events, "response.content_part.added")[0]["part"] == {
        "type": "refusal",
        "refusal": "",
    }
    assert by_type(events, "response.refusal.done")[0]["refusal"] == "I can't help with that."
    assert not by_type(events, "response.output_text.delta")


def test_three_hundred_deltas():
    deltas = by_type(stream("300-deltas"), "response.output_text.delta")
    assert len(deltas) == 300
    assert all(d["delta"] == "x" for d in deltas)


def test_incomplete_and_failed_terminals():
    last = stream("incomplete-length")[-1]
    assert last["type"] == "response.incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert last["response"]["output"][-1]["status"] == "incomplete"
    last = stream("failed")[-1]
    assert last["type"] == "response.failed"
    assert last["response"]["error"] == {"code": "server_error", "message": "The model crashed."}


def test_error_event_replaces_the_terminal():
    events = stream("error-event-early")
    assert [e["type"] for e in events] == ["response.created", "response.in_progress", "error"]
    assert events[-1] == {
        "type": "error",
        "sequence_number": 2,
        "code": "server_error",
        "message": "overloaded",
        "param": None,
    }


def test_ciphertext_differ_and_completed_only():
    events = stream("ciphertext-differ")
    done = by_type(events, "response.output_item.done")[0]["item"]["encrypted_content"]
    final = events[-1]["response"]["output"][0]["encrypted_content"]
    assert done != final
    events = stream("ciphertext-completed-only")
    assert "encrypted_content" not in by_type(events, "response.output_item.done")[0]["item"]
    assert events[-1]["response"]["output"][0]["encrypted_content"].startswith("gAAAAAB")


def test_usage_overrides_and_totals():
    usage = stream("usage")[-1]["response"]["usage"]
    assert usage["input_tokens"] == 100
    assert usage["input_tokens_details"] == {"cached_tokens": 60, "cache_write_tokens": 7}
    assert usage["total_tokens"] == 100 + usage["output_tokens"]
    assert usage["output_tokens_details"]["reasoning_tokens"] > 0


def test_response_echoes_the_request():
    response = stream("text", temperature=1, max_output_tokens=500, user="u")[-1]["response"]
    expected = {
        "model": "gpt-5",
        "instructions": "be brief",
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "store": False,
        "temperature": 1.0,
        "top_p": 1.0,
        "max_output_tokens": 500,
        "metadata": {"k": "v"},
        "prompt_cache_key": "pck",
        "safety_identifier": "user-1",
        "user": "u",
        "reasoning": {"effort": "low", "summary": "auto"},
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
    }
    assert {k: response[k] for k in expected} == expected
    assert [t["name"] for t in response["tools"]] == ["read_file", "grep", "ApplyPatch", "Shell"]
    assert response["tools"][1] == {
        "type": "function",
        "description": "search",
        "name": "grep",
        "parameters": {},
        "strict": True,
    }
    assert response["id"].startswith("resp_")


def test_ids_look_like_openais_and_share_a_response_suffix():
    events = stream("preamble+answer")
    final = events[-1]["response"]
    ids = [final["id"], *(item["id"] for item in final["output"])]
    assert [i.split("_")[0] for i in ids] == ["resp", "rs", "msg", "msg"]
    assert all(len(i.split("_")[1]) == 48 for i in ids)
    assert len({i[-16:] for i in ids}) == 1


def test_obfuscation_padding_can_be_switched_off():
    events = stream("text")
    assert all("obfuscation" in e for e in by_type(events, "response.output_text.delta"))
    events = stream("text", stream_options={"include_obfuscation": False})
    assert not any("obfuscation" in e for e in events)


def test_same_seed_same_bytes():
    assert answer({}, stream=True).frames == answer({}, stream=True).frames


def test_sse_frame_is_compact_and_framed():
    assert sse_frame({"type": "x", "a": "é"}) == 'event: x\ndata: {"type":"x","a":"é"}\n\n'.encode()


@pytest.mark.parametrize(
    ("text", "size", "count", "pieces"),
    [
        ("Hello big world", None, None, ["Hello", " big", " world"]),
        ("abcdef", 4, None, ["abcd", "ef"]),
        ("abcdef", None, 3, ["ab", "cd", "ef"]),
        ("ab", None, 5, ["a", "b"]),
        ("", 1, None, []),
    ],
)
def test_split_text(text, size, count, pieces):
    assert split_text(text, size, count) == pieces
