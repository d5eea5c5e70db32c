"""relay.core.capture: admit, observe or poison one generation's original output.

The upstream side comes from the fake upstream (an independent source of real-shaped
streams, ciphertext modes included) or from hand-built events. The client side always goes
through the real translators: ChatStreamConverter chunks for streaming answers, and
response_to_chat_completion of the converter's final response for JSON answers (the relay
streams upstream in both modes), so the projection check is tested against them.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from fakeupstream.fake import FakeUpstream
from fakeupstream.scripts import parse_script
from relay.core.capture import (
    DEFAULT_MAX_BYTES,
    PAYLOAD_DOMAIN,
    CaptureResult,
    ClientProjection,
    OutputCapture,
    finish_capture,
)
from relay.core.predict import SentToolCall, predict_envelope
from relay.core.receipts import Reason
from relay.core.responses_events import decode
from relay.errors import RelayError
from relay.settings.custom_calls import CustomCallForm
from relay.translate.responses_to_chat import project_output, response_to_chat_completion
from relay.translate.stream_converter import ChatStreamConverter, Chunk

Event = tuple[str, dict[str, Any]]

TOOLS = [
    {"type": "function", "name": "read_file", "parameters": {"type": "object"}, "strict": False},
    {"type": "function", "name": "grep", "description": "search", "parameters": {}},
]
REQUEST = {
    "model": "gpt-5",
    "input": [{"role": "user", "content": "hello there"}],
    "tools": TOOLS,
    "tool_choice": "auto",
    "reasoning": {"effort": "low", "summary": "auto"},
    "include": ["reasoning.encrypted_content"],
    "store": False,
    "stream": True,
}


# --- driving both sides ------------------------------------------------------------------


def fake_events(script: dict[str, Any], **overrides: Any) -> list[Event]:
    fake = FakeUpstream(seed=7, secret=b"k" * 32)
    answer = fake.answer({**REQUEST, **overrides}, "sk-test", parse_script(script))[0]
    assert answer.stream
    # Fresh objects, as parsed off the wire (the fake shares nested lists between events).
    events = json.loads(json.dumps(answer.parsed))
    return [(event["type"], event) for event in events]


@dataclass
class Relayed:
    capture: OutputCapture
    streamed: ClientProjection  # from the converter's chunks
    answered: ClientProjection  # from the JSON answer (empty when the client got an error)
    chunks: list[Chunk]


def relay(
    events: list[Event],
    *,
    summaries: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
    form: CustomCallForm = "function",
) -> Relayed:
    capture = OutputCapture(project=project_output, max_bytes=max_bytes)
    converter = ChatStreamConverter(completion_id="chatcmpl-1", created=1, model="alias",
                                    include_usage=True, reasoning_summaries=summaries,
                                    custom_tool_calls=form)  # fmt: skip
    streamed = ClientProjection(max_bytes=max_bytes)
    chunks: list[Chunk] = []
    failed = False
    for event_type, data in events:
        capture.feed(decode(event_type, data))
        if failed:
            continue  # the client got an error; capture still sees the rest
        try:
            new = converter.feed(decode(event_type, data))
        except RelayError:
            failed = True
            continue
        for chunk in new:
            streamed.feed_chunk(chunk)
        chunks += new
    answered = ClientProjection(max_bytes=max_bytes)
    if converter.final_response is not None:
        try:
            completion = response_to_chat_completion(
                converter.final_response, completion_id="chatcmpl-1", created=1,
                model="alias", reasoning_summaries=summaries, custom_tool_calls=form)  # fmt: skip
            answered = ClientProjection.from_completion(completion, max_bytes=max_bytes)
        except RelayError:
            pass
    return Relayed(capture, streamed, answered, chunks)


def decide(events: list[Event], **options: Any) -> tuple[CaptureResult, CaptureResult]:
    """The decision for the streaming answer and for the JSON answer."""
    relayed = relay(events, **options)
    return (
        finish_capture(relayed.capture, relayed.streamed),
        finish_capture(relayed.capture, relayed.answered),
    )


def final_response(events: list[Event]) -> dict[str, Any]:
    return next(data["response"] for kind, data in events if kind == "response.completed")


def check_payload(result: CaptureResult, events: list[Event]) -> None:
    """Admit/observe carry the completed output, exactly, with its digests."""
    assert result.envelope is not None and result.output is not None
    assert list(result.output) == final_response(events)["output"]
    output_json = json.dumps(list(result.output), ensure_ascii=False, separators=(",", ":"))
    assert result.output_json == output_json
    assert result.output_hash == hashlib.sha256(output_json.encode()).hexdigest()
    assert result.payload_fingerprint == hashlib.sha256(
        b"rrr/payload/v1\0" + output_json.encode()).hexdigest()  # fmt: skip
    assert PAYLOAD_DOMAIN == b"rrr/payload/v1\0"
    assert result.snapshot == "gpt-5"


def check_poison(result: CaptureResult, reason: Reason) -> None:
    assert (result.kind, result.reason) == ("poison", reason)
    assert result.envelope is None
    payload = (result.output, result.output_json, result.payload_fingerprint, result.output_hash)
    assert payload == (None, None, None, None)


# --- fake upstream scripts ------------------------------------------------------------------

REASONING = {"type": "reasoning", "summary": ["**Plan**", "then act"]}
FAKE_CASES: dict[str, tuple[dict[str, Any], dict[str, Any], str, Reason | None]] = {
    "reasoning+text": (
        {"output": [REASONING, {"type": "message", "text": "Answer ✓ «é»"}]}, {}, "admit", None),
    "one delta per char": (
        {"output": [REASONING, {"type": "message", "text": "abc def"}], "delta_size": 1}, {},
        "admit", None),
    "preamble+answer": (
        {"output": [REASONING,
                    {"type": "message", "text": "Let me check. ", "phase": "commentary"},
                    {"type": "message", "text": "Done.", "phase": "final_answer"}]},
        {}, "admit", None),
    "text+call": (
        {"output": [REASONING, {"type": "message", "text": "Reading."},
                    {"type": "function_call", "name": "read_file",
                     "arguments": '{"path": "a.py", "n": [1, 2.5, null, true]}'}]},
        {}, "admit", None),
    "parallel calls": (
        {"output": [REASONING, {"type": "function_call", "name": "read_file", "arguments": "{}"},
                    {"type": "reasoning", "summary": []},
                    {"type": "function_call", "name": "grep", "arguments": '{"q": "x"}'}]},
        {}, "admit", None),
    "ciphertext differ": (
        {"output": [REASONING, {"type": "message", "text": "t"}], "ciphertext": "differ"}, {},
        "admit", None),
    "ciphertext completed_only": (
        {"output": [REASONING, {"type": "message", "text": "t"}], "ciphertext": "completed_only"},
        {}, "admit", None),
    "no reasoning item": (
        {"output": [{"type": "message", "text": "plain"}]}, {}, "observe", Reason.NO_REASONING),
    "reasoning without include": (
        {"output": [REASONING, {"type": "message", "text": "t"}]}, {"include": []},
        "observe", Reason.NO_REASONING),
    "empty text": (
        {"output": [REASONING, {"type": "message", "text": ""}]}, {},
        "observe", Reason.EMPTY_ENVELOPE),
    "reasoning only": ({"output": [REASONING]}, {}, "observe", Reason.EMPTY_ENVELOPE),
    "reasoning last": (
        {"output": [REASONING, {"type": "message", "text": "t"}, REASONING]}, {},
        "observe", Reason.UNSUPPORTED_OUTPUT),
    "refusal": (
        {"output": [REASONING, {"type": "refusal", "text": "I can't help with that."}]}, {},
        "poison", Reason.REFUSAL),
    "unsafe arguments": (
        {"output": [REASONING,
                    {"type": "function_call", "name": "grep", "arguments": '{"n": 1.0}'}]},
        {}, "poison", Reason.UNKNOWN_PREDICTION),
    "invalid arguments": (
        {"output": [REASONING, {"type": "function_call", "name": "grep", "arguments": '{"n":'}]},
        {}, "poison", Reason.UNKNOWN_PREDICTION),
    "incomplete length": (
        {"output": [REASONING, {"type": "message", "text": "cut"}], "status": "incomplete"}, {},
        "poison", Reason.INCOMPLETE_RESPONSE),
    "incomplete filter": (
        {"output": [REASONING, {"type": "message", "text": "bad"}], "status": "incomplete",
         "incomplete_reason": "content_filter"}, {}, "poison", Reason.INCOMPLETE_RESPONSE),
    "failed": (
        {"output": [REASONING], "status": "failed",
         "error": {"code": "server_error", "message": "The model crashed."}}, {},
        "poison", Reason.INCOMPLETE_RESPONSE),
    "error event": (
        {"output": [REASONING, {"type": "message", "text": "t"}],
         "error_event": {"message": "stream broke"}}, {}, "poison", Reason.INCOMPLETE_RESPONSE),
    "error event early": (
        {"output": [REASONING, {"type": "message", "text": "t"}],
         "error_event": {"message": "overloaded", "after_events": 4}}, {},
        "poison", Reason.INCOMPLETE_RESPONSE),
}  # fmt: skip


@pytest.mark.parametrize("summaries", [False, True])
@pytest.mark.parametrize("name", FAKE_CASES)
def test_fake_upstream_scripts(name: str, summaries: bool) -> None:
    script, overrides, kind, reason = FAKE_CASES[name]
    events = fake_events(script, **overrides)
    streamed, answered = decide(events, summaries=summaries)
    assert (streamed.kind, streamed.reason) == (kind, reason)
    assert answered == streamed  # JSON and SSE answers decide alike
    if kind == "poison":
        check_poison(streamed, reason)  # type: ignore[arg-type]
    else:
        check_payload(streamed, events)


def test_admitted_envelope_is_predicted_from_what_was_sent() -> None:
    script, *_ = FAKE_CASES["text+call"]
    events = fake_events(script)
    relayed = relay(events)
    result = finish_capture(relayed.capture, relayed.streamed)
    call = final_response(events)["output"][2]
    assert result.envelope == {
        "role": "assistant",
        "content": "Reading.",
        "tool_calls": [{"id": call["call_id"], "type": "function", "function": {
            "name": "read_file", "arguments": '{"path":"a.py","n":[1,2.5,null,true]}'}}],
    }  # fmt: skip


def test_completed_ciphertext_is_authoritative() -> None:
    script, *_ = FAKE_CASES["ciphertext differ"]
    events = fake_events(script)
    done = next(d["item"] for k, d in events if k == "response.output_item.done")
    final = final_response(events)["output"][0]
    assert done["encrypted_content"] != final["encrypted_content"]  # the fake really differs
    result, _ = decide(events)
    assert result.kind == "admit"
    assert result.output is not None
    assert result.output[0]["encrypted_content"] == final["encrypted_content"]
    assert done["encrypted_content"] not in (result.output_json or "")


@pytest.mark.parametrize("name", [n for n, case in FAKE_CASES.items() if case[2] != "poison"])
def test_projection_matches_the_sdk_accumulator(name: str) -> None:
    """ClientProjection reads the converter's chunks as the openai SDK does."""
    script, overrides, *_ = FAKE_CASES[name]
    relayed = relay(fake_events(script, **overrides))
    state = ChatCompletionStreamState()
    for chunk in relayed.chunks:
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk, strict=True))
    message = state.get_final_completion().choices[0].message
    sent = relayed.streamed
    assert sent.known
    assert sent.text == (message.content or "")
    assert sent.refusal == message.refusal
    assert sent.tool_calls == tuple(
        SentToolCall(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []
    )
    for projection in (relayed.streamed, relayed.answered):
        assert (projection.text, projection.tool_calls) == (sent.text, sent.tool_calls)


# --- hand-built streams --------------------------------------------------------------------


def ev(event_type: str, **fields: Any) -> Event:
    return event_type, {"type": event_type, **fields}


def reasoning(token: str | None = "gAAAA-one", item_id: str | None = "rs_1") -> dict[str, Any]:
    item: dict[str, Any] = {"type": "reasoning", "summary": []}
    if item_id is not None:
        item["id"] = item_id
    if token is not None:
        item["encrypted_content"] = token
    return item


def message(text: str, item_id: str = "msg_1", **extra: Any) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}], **extra}  # fmt: skip


def fcall(
    call_id: str, name: str = "grep", arguments: str = "{}", item_id: str = ""
) -> dict[str, Any]:
    return {"id": item_id or f"fc_{call_id}", "type": "function_call", "status": "completed",
            "call_id": call_id, "name": name, "arguments": arguments}  # fmt: skip


def response(output: Any, status: str = "completed") -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "status": status, "model": "gpt-5",
            "output": output}  # fmt: skip


def stream(
    *items: dict[str, Any],
    done: dict[int, dict[str, Any]] | None = None,
    final: Any = None,
    status: str = "completed",
) -> list[Event]:
    """created, each item added then done (``done`` overrides by index), then the terminal
    event with ``final`` (default: the items)."""
    events = [ev("response.created", response=response([], "in_progress"))]
    for index, item in enumerate(items):
        shell = {**item, "content": []} if item["type"] == "message" else dict(item)
        events.append(ev("response.output_item.added", output_index=index, item=shell))
        finished = (done or {}).get(index, item)
        events.append(ev("response.output_item.done", output_index=index, item=finished))
    output = list(items) if final is None else final
    events.append(ev(f"response.{status}", response=response(output, status)))
    return copy.deepcopy(events)


def with_events(events: list[Event], at: int, *extra: Event) -> list[Event]:
    return [*events[:at], *extra, *events[at:]]


BASE = (reasoning(), message("Hello"))
HAND_CASES: dict[str, tuple[Callable[[], list[Event]], str, Reason | None]] = {
    "baseline": (lambda: stream(*BASE), "admit", None),
    "several message items, one choice": (
        lambda: stream(reasoning(), message("a", "msg_1"), message("b", "msg_2")), "admit", None),
    "calls in order": (
        lambda: stream(reasoning(), message("x"), fcall("call_a"), fcall("call_b", "read_file")),
        "admit", None),
    "ciphertext differs, ids match": (
        lambda: stream(*BASE, done={0: reasoning("gAAAA-two")}), "admit", None),
    "done has no ciphertext": (lambda: stream(*BASE, done={0: reasoning(None)}), "admit", None),
    "done has null ciphertext": (
        lambda: stream(*BASE, done={0: {**reasoning(), "encrypted_content": None}}), "admit", None),
    "key order differs": (
        lambda: stream(*BASE, done={1: dict(reversed(message("Hello").items()))}), "admit", None),
    "done text differs": (
        lambda: stream(*BASE, done={1: message("Hellx")}), "poison", Reason.CIPHERTEXT_MISMATCH),
    "done extra field": (
        lambda: stream(*BASE, done={1: message("Hello", phase="x")}),
        "poison", Reason.CIPHERTEXT_MISMATCH),
    "1 is not true": (
        lambda: stream(reasoning(), message("Hello", n=1), done={1: message("Hello", n=True)}),
        "poison", Reason.CIPHERTEXT_MISMATCH),
    "done ciphertext, completed none": (
        lambda: stream(reasoning(None), message("Hello"), done={0: reasoning()}),
        "poison", Reason.CIPHERTEXT_MISMATCH),
    "done ciphertext empty": (
        lambda: stream(*BASE, done={0: reasoning("")}), "poison", Reason.CIPHERTEXT_MISMATCH),
    "completed ciphertext empty": (
        lambda: stream(reasoning(""), message("Hello"), done={0: reasoning()}),
        "poison", Reason.CIPHERTEXT_MISMATCH),
    "ciphertext differs, no id": (
        lambda: stream(reasoning(item_id=None), message("Hello"),
                       done={0: reasoning("gAAAA-two", item_id=None)}),
        "poison", Reason.CIPHERTEXT_MISMATCH),
    "reasoning id differs": (
        lambda: stream(*BASE, done={0: reasoning(item_id="rs_2")}),
        "poison", Reason.CIPHERTEXT_MISMATCH),
    "completed lacks an item": (
        lambda: stream(*BASE, final=[reasoning()]), "poison", Reason.CIPHERTEXT_MISMATCH),
    "completed has an extra item": (
        lambda: stream(*BASE, final=[*BASE, message("more", "msg_2")]),
        "poison", Reason.CIPHERTEXT_MISMATCH),
    "completed output empty": (
        lambda: stream(*BASE, final=[]), "poison", Reason.CIPHERTEXT_MISMATCH),
    "duplicate done, equal": (
        lambda: with_events(stream(*BASE), 5, ev("response.output_item.done", output_index=1,
                                                  item=message("Hello"))), "admit", None),
    "duplicate done, different": (
        lambda: with_events(stream(*BASE), 5, ev("response.output_item.done", output_index=1,
                                                  item=message("Hello!"))),
        "poison", Reason.CIPHERTEXT_MISMATCH),
    "no terminal event": (lambda: stream(*BASE)[:-1], "poison", Reason.INCOMPLETE_RESPONSE),
    "incomplete event": (
        lambda: stream(*BASE, status="incomplete"), "poison", Reason.INCOMPLETE_RESPONSE),
    "completed event, status in_progress": (
        lambda: [*stream(*BASE)[:-1], ev("response.completed", response=response(list(BASE),
                                                                              "in_progress"))],
        "poison", Reason.INCOMPLETE_RESPONSE),
    "done event without output_index": (
        lambda: with_events(stream(*BASE), 5, ev("response.output_item.done", item=message("x"))),
        "poison", Reason.INCOMPLETE_RESPONSE),
    "completed output not a list": (
        lambda: stream(*BASE, final={"0": reasoning()}), "poison", Reason.INCOMPLETE_RESPONSE),
    "completed response not an object": (
        lambda: [*stream(*BASE)[:-1], ev("response.completed", response=[])],
        "poison", Reason.INCOMPLETE_RESPONSE),
    "NaN in output": (
        lambda: stream(reasoning(), message("Hello", score=float("nan"))),
        "poison", Reason.INCOMPLETE_RESPONSE),
    "lone surrogate in text": (
        lambda: stream(reasoning(), message("bad \ud800")), "poison", Reason.INCOMPLETE_RESPONSE),
    "deltas contradict the final text": (
        lambda: with_events(stream(*BASE), 4, ev("response.output_text.delta", item_id="msg_1",
                            output_index=1, content_index=0, delta="Bye", logprobs=[])),
        "poison", Reason.PROJECTION_MISMATCH),
    "one call id twice": (
        lambda: stream(reasoning(), fcall("call_a", item_id="fc_1"),
                       fcall("call_a", item_id="fc_2")),
        "poison", Reason.PROJECTION_MISMATCH),
    "refusal part": (
        lambda: stream(reasoning(), {**message(""), "content": [
            {"type": "refusal", "refusal": "No."}]}), "poison", Reason.REFUSAL),
    "unsupported item type": (
        lambda: stream(reasoning(), {"id": "ws_1", "type": "web_search_call", "status": "completed"},
                       message("Found it.")), "observe", Reason.UNSUPPORTED_OUTPUT),
    "non-assistant message": (
        lambda: stream(reasoning(), {**message("Hi"), "role": "system"}),
        "observe", Reason.UNSUPPORTED_OUTPUT),
    "reasoning item without ciphertext among others": (
        lambda: stream(reasoning(), message("Hi"), reasoning(None, "rs_2"), message("!", "msg_2")),
        "observe", Reason.NO_REASONING),
    "events after the terminal are ignored": (
        lambda: [*stream(*BASE), ev("response.output_item.done", output_index=5,
                                    item=message("late"))], "admit", None),
}  # fmt: skip


@pytest.mark.parametrize("name", HAND_CASES)
def test_hand_built_streams(name: str) -> None:
    build, kind, reason = HAND_CASES[name]
    events = build()
    before = copy.deepcopy(events)
    streamed, answered = decide(events)
    assert (streamed.kind, streamed.reason) == (kind, reason)
    if reason is Reason.PROJECTION_MISMATCH:
        # Only the stream went astray: the JSON answer is built from the final items.
        assert answered.kind == "admit"
    else:
        assert answered == streamed
    if kind == "poison":
        check_poison(streamed, reason)  # type: ignore[arg-type]
    else:
        check_payload(streamed, events)
    # NaN != NaN, so compare the JSON text of what went in.
    assert json.dumps(events) == json.dumps(before), "capture must not modify events"


def test_reasons_name_nothing_secret() -> None:
    """Reasons are fixed codes; nothing in a poison result carries text or ciphertext."""
    result, _ = decide(stream(*BASE, done={1: message("secret words")}))
    assert "secret" not in repr(result) and "gAAAA" not in repr(result)


# --- the client side -----------------------------------------------------------------------


def chunk(
    delta: dict[str, Any], finish_reason: str | None = None, index: int = 0
) -> dict[str, Any]:
    return {"choices": [{"index": index, "delta": delta, "finish_reason": finish_reason}]}


def projection(*chunks: dict[str, Any]) -> ClientProjection:
    result = ClientProjection()
    for item in chunks:
        result.feed_chunk(item)
    return result


def call_delta(index: int, **fields: Any) -> dict[str, Any]:
    function = {k: v for k, v in fields.items() if k in ("name", "arguments")}
    call = {"index": index, **{k: v for k, v in fields.items() if k in ("id", "type")}}
    return {"tool_calls": [{**call, "function": function}]}


def test_projection_accumulates_like_a_client() -> None:
    sent = projection(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hel"}),
        chunk(call_delta(0, id="call_a", type="function", name="grep", arguments="")),
        chunk(call_delta(1, id="call_b", type="function", name="read", arguments="{")),
        chunk(call_delta(0, arguments='{"q":')),
        chunk({"content": "lo", "reasoning_content": "thinking"}),
        chunk(call_delta(0, arguments='"x"}')),
        chunk(call_delta(1, arguments="}")),
        chunk({}, "tool_calls"),
        {"choices": [], "usage": {"prompt_tokens": 1}},
    )
    assert sent.known
    assert (sent.text, sent.refusal, sent.finish_reason) == ("Hello", None, "tool_calls")
    assert sent.tool_calls == (SentToolCall("call_a", "grep", '{"q":"x"}'),
                               SentToolCall("call_b", "read", "{}"))  # fmt: skip


def test_projection_from_completion() -> None:
    completion = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "refusal": None, "annotations": [],
        "tool_calls": [{"id": "call_a", "type": "function",
                        "function": {"name": "grep", "arguments": "{}"}}]}}]}  # fmt: skip
    sent = ClientProjection.from_completion(completion)
    assert sent.known
    assert (sent.text, sent.refusal, sent.finish_reason) == ("", None, "tool_calls")
    assert sent.tool_calls == (SentToolCall("call_a", "grep", "{}"),)
    assert not ClientProjection.from_completion({"choices": []}).known


AMBIGUOUS: dict[str, list[dict[str, Any]]] = {
    "second id for a call": [chunk(call_delta(0, id="call_a", name="grep")),
                             chunk(call_delta(0, id="call_a"))],
    "second name for a call": [chunk(call_delta(0, id="call_a", name="grep")),
                               chunk(call_delta(0, name="grep"))],
    "call without an id": [chunk(call_delta(0, name="grep"))],
    "gap in call indexes": [chunk(call_delta(1, id="call_a", name="grep"))],
    "not a function call": [chunk(call_delta(0, id="call_a", name="grep", type="custom"))],
    "another choice": [chunk({"content": "x"}, index=1)],
    "unknown delta field": [chunk({"audio": {"id": "a"}})],
    "role other than assistant": [chunk({"role": "user"})],
    "content not a string": [chunk({"content": ["x"]})],
    "no choices list": [{"usage": {}}],
}  # fmt: skip


@pytest.mark.parametrize("name", AMBIGUOUS)
def test_ambiguous_projection_is_not_known(name: str) -> None:
    assert not projection(*AMBIGUOUS[name]).known


def test_ambiguity_in_what_was_sent_poisons() -> None:
    events = stream(reasoning(), fcall("call_a"))
    relayed = relay(events)
    assert finish_capture(relayed.capture, relayed.streamed).kind == "admit"
    # A second id for the same call: an SDK would read "call_acall_a".
    relayed.streamed.feed_chunk(chunk(call_delta(0, id="call_a")))
    check_poison(finish_capture(relayed.capture, relayed.streamed), Reason.UNKNOWN_PREDICTION)


def test_finish_reason_must_agree_when_sent() -> None:
    relayed = relay(stream(*BASE))
    assert relayed.streamed.finish_reason == "stop"
    relayed.streamed.feed_chunk(chunk({}, "length"))
    check_poison(finish_capture(relayed.capture, relayed.streamed), Reason.PROJECTION_MISMATCH)
    # Before the finish chunk is fed (decided ahead of terminal frames) it is not required.
    early = projection(chunk({"role": "assistant", "content": "Hello"}))
    assert finish_capture(relay(stream(*BASE)).capture, early).kind == "admit"


# --- bounds --------------------------------------------------------------------------------


def test_capture_exhaustion_poisons() -> None:
    big = "gAAAA" + "x" * 2000
    # The done items are over the allowance while streaming, before any terminal event.
    relayed = relay(stream(reasoning(big), message("Hello"))[:-1], max_bytes=1000)
    assert relayed.capture.exhausted and not relayed.capture.finished
    # Repeated done items count each time, even when the completed output would fit.
    repeat = ev("response.output_item.done", output_index=1, item=message("Hello"))
    events = with_events(stream(*BASE), 5, *[repeat] * 20)
    relayed = relay(events, max_bytes=1000)
    assert relayed.capture.exhausted and relayed.capture.finished
    check_poison(finish_capture(relayed.capture, relayed.streamed), Reason.CAPTURE_EXHAUSTED)
    assert finish_capture(*_sides(events)).kind == "admit"
    # Only the completed output is over it (ciphertext filled only on completed).
    events = stream(reasoning(big), message("Hello"), done={0: reasoning(None)})
    relayed = relay(events, max_bytes=1000)
    assert relayed.capture.exhausted
    check_poison(finish_capture(relayed.capture, relayed.streamed), Reason.CAPTURE_EXHAUSTED)
    # The boundary: exactly the payload's size fits.
    output = final_response(events)["output"]
    size = len(json.dumps(output, ensure_ascii=False, separators=(",", ":")).encode())
    relayed = relay(events, max_bytes=size)
    assert finish_capture(relayed.capture, relayed.streamed).kind == "admit"
    assert relay(events, max_bytes=size - 1).capture.exhausted


def test_projection_exhaustion_poisons() -> None:
    relayed = relay(stream(reasoning(), message("é" * 600)))  # 1200 UTF-8 bytes of text
    sent = ClientProjection(max_bytes=1100)
    for item in relayed.chunks:
        sent.feed_chunk(item)
    assert sent.exhausted and not relayed.capture.exhausted
    assert sent.text == ""  # dropped, not kept growing
    check_poison(finish_capture(relayed.capture, sent), Reason.CAPTURE_EXHAUSTED)


def test_finish_is_repeatable() -> None:
    relayed = relay(stream(*BASE))
    first = finish_capture(relayed.capture, relayed.streamed)
    assert finish_capture(relayed.capture, relayed.streamed) == first


# --- properties ----------------------------------------------------------------------------

_INDEX_KEY = re.compile(r"(?:0|[1-9][0-9]*)\Z")
_scalars = (st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1)
            | st.text(max_size=6))  # fmt: skip
_keys = st.text(min_size=1, max_size=5).filter(lambda k: not _INDEX_KEY.match(k))
_arguments = st.dictionaries(_keys, _scalars | st.lists(_scalars, max_size=3), max_size=3)
_visible = st.one_of(
    st.builds(lambda text: {"type": "message", "text": text}, st.text(max_size=30)),
    st.builds(lambda name, args: {"type": "function_call", "name": name,
                                  "arguments": json.dumps(args, ensure_ascii=False)},
              st.sampled_from(["read_file", "grep"]), _arguments),
)  # fmt: skip
_summaries = st.lists(st.text(min_size=1, max_size=10), max_size=2)


@st.composite
def outputs(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Reasoning first, then visible items, each maybe preceded by more reasoning."""
    output: list[dict[str, Any]] = []
    for item in draw(st.lists(_visible, min_size=1, max_size=4)):
        if not output or draw(st.booleans()):
            output.append({"type": "reasoning", "summary": draw(_summaries)})
        output.append(item)
    return output


def _paths(value: Any, skip: frozenset[str] = frozenset()) -> Iterator[tuple[Any, ...]]:
    """Every place in an item: each key and list position, containers included."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key not in skip:
                yield (key,)
                yield from ((key, *rest) for rest in _paths(inner))
    elif isinstance(value, list):
        for position, inner in enumerate(value):
            yield (position,)
            yield from ((position, *rest) for rest in _paths(inner))


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "~"
    if isinstance(value, list):
        return [*value, 0]
    if isinstance(value, dict):
        return {**value, "~": 0}
    return "~"


def _mutate(item: dict[str, Any], path: tuple[Any, ...], how: str) -> None:
    *parent_path, last = path
    parent: Any = item
    for step in parent_path:
        parent = parent[step]
    if how == "drop" and isinstance(parent, dict):
        del parent[last]
    elif how == "add":
        parent = parent[last] if isinstance(parent[last], dict) else item
        parent["unexpected_field"] = None
    else:
        parent[last] = _changed(parent[last])


@settings(max_examples=150, deadline=None, print_blob=True)
@given(
    output=outputs(),
    ciphertext=st.sampled_from(["normal", "differ", "completed_only"]),
    delta_size=st.none() | st.integers(1, 4),
    summaries=st.booleans(),
    data=st.data(),
)
def test_normal_streams_admit_and_any_done_change_poisons(
    output: list[dict[str, Any]], ciphertext: str, delta_size: int | None, summaries: bool,
    data: st.DataObject,
) -> None:  # fmt: skip
    script: dict[str, Any] = {"output": output, "ciphertext": ciphertext}
    if delta_size is not None:
        script["delta_size"] = delta_size
    events = fake_events(script)
    texts = "".join(item["text"] for item in output if item["type"] == "message")
    calls = [item for item in final_response(events)["output"] if item["type"] == "function_call"]
    assume(texts or calls)  # an empty envelope is only observed

    relayed = relay(events, summaries=summaries)
    result = finish_capture(relayed.capture, relayed.streamed)
    assert (result.kind, result.reason) == ("admit", None)
    sent = relayed.streamed
    assert result.envelope == predict_envelope(sent.text, sent.tool_calls, sent.refusal)
    expected_calls = [SentToolCall(c["call_id"], c["name"], c["arguments"]) for c in calls]
    assert result.envelope == predict_envelope(texts, expected_calls)  # from the script itself
    check_payload(result, events)
    assert finish_capture(relayed.capture, relayed.answered) == result

    # Any change to a non-ciphertext field of one done item poisons the position.
    done_at = [i for i, (kind, _) in enumerate(events) if kind == "response.output_item.done"]
    at = data.draw(st.sampled_from(done_at), label="done event")
    mutated = copy.deepcopy(events)
    item = mutated[at][1]["item"]
    skip = frozenset({"encrypted_content"}) if item["type"] == "reasoning" else frozenset()
    path = data.draw(st.sampled_from(list(_paths(item, skip))), label="path")
    _mutate(item, path, data.draw(st.sampled_from(["change", "drop", "add"]), label="how"))
    check_poison(finish_capture(*_sides(mutated)), Reason.CIPHERTEXT_MISMATCH)


def _sides(events: list[Event]) -> tuple[OutputCapture, ClientProjection]:
    relayed = relay(events)
    return relayed.capture, relayed.streamed
