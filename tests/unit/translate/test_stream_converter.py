"""relay.translate.stream_converter: Responses events → Chat chunks."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.chat import ChatCompletionChunk

from relay.core.responses_events import decode
from relay.errors import UpstreamFailed, UpstreamProtocolError
from relay.translate.events import ChunkDelta
from relay.translate.stream_converter import ChatStreamConverter, Chunk

USAGE = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
         "input_tokens_details": {"cached_tokens": 0},
         "output_tokens_details": {"reasoning_tokens": 2}}  # fmt: skip
CHAT_USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
              "prompt_tokens_details": {"cached_tokens": 0},
              "completion_tokens_details": {"reasoning_tokens": 2}}  # fmt: skip


Event = tuple[str, dict[str, Any]]


def converter(*, usage: bool = False, summaries: bool = False) -> ChatStreamConverter:
    return ChatStreamConverter(completion_id="chatcmpl-9", created=42, model="gpt-5",
                               include_usage=usage, reasoning_summaries=summaries)  # fmt: skip


def run(conv: ChatStreamConverter, events: list[Event]) -> list[Chunk]:
    chunks: list[Chunk] = []
    for event_type, data in events:
        chunks += conv.feed(decode(event_type, data))
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk, strict=True)
    return chunks


def deltas(chunks: list[Chunk]) -> list[tuple[ChunkDelta, str | None]]:
    return [(c["choices"][0]["delta"], c["choices"][0]["finish_reason"]) for c in chunks]


def ev(event_type: str, **fields: Any) -> Event:
    return event_type, {"type": event_type, "sequence_number": 0, **fields}


def resp(*output: dict[str, Any], status: str = "completed", **extra: Any) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "created_at": 1, "status": status,
            "model": "gpt-5", "output": list(output), "usage": USAGE, **extra}  # fmt: skip


def created() -> tuple[str, dict[str, Any]]:
    return ev("response.created", response=resp(status="in_progress", usage=None))


def completed(*output: dict[str, Any], **extra: Any) -> tuple[str, dict[str, Any]]:
    return ev("response.completed", response=resp(*output, **extra))


def text_delta(delta: str, output_index: int = 0, content_index: int = 0) -> Event:
    return ev("response.output_text.delta", item_id="msg_1", output_index=output_index,
              content_index=content_index, delta=delta, logprobs=[])  # fmt: skip


def text_done(text: str, output_index: int = 0, content_index: int = 0) -> Event:
    return ev("response.output_text.done", item_id="msg_1", output_index=output_index,
              content_index=content_index, text=text, logprobs=[])  # fmt: skip


def message(*texts: str, item_id: str = "msg_1") -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": t, "annotations": []} for t in texts],
    }


def fcall(call_id: str, name: str, arguments: str = "") -> dict[str, Any]:
    return {"id": "fc_" + call_id, "type": "function_call", "status": "in_progress",
            "call_id": call_id, "name": name, "arguments": arguments}  # fmt: skip


def args_delta(delta: str, output_index: int) -> Event:
    return ev("response.function_call_arguments.delta", item_id="fc", output_index=output_index,
              delta=delta)  # fmt: skip


ROLE = ({"role": "assistant", "content": ""}, None)


def test_text_stream_exact_chunks() -> None:
    chunks = run(converter(), [
        created(),
        ev("response.in_progress", response=resp(status="in_progress")),
        ev("response.output_item.added", output_index=0,
           item={"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant",
                 "content": []}),
        text_delta("Hel"), text_delta("lo"), text_done("Hello"),
        ev("response.output_item.done", output_index=0, item=message("Hello")),
        completed(message("Hello")),
    ])  # fmt: skip
    base = {"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 42, "model": "gpt-5"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                                     "logprobs": None}]}  # fmt: skip

    assert chunks == [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hel"}),
        chunk({"content": "lo"}),
        chunk({}, "stop"),
    ]


def test_include_usage_adds_usage_null_everywhere_and_a_final_usage_chunk() -> None:
    chunks = run(converter(usage=True), [created(), text_delta("Hi"), completed(message("Hi"))])
    assert [c["usage"] for c in chunks[:-1]] == [None, None, None]
    assert chunks[-1] == {"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 42,
                          "model": "gpt-5", "choices": [], "usage": CHAT_USAGE}  # fmt: skip


def test_without_include_usage_no_usage_key() -> None:
    chunks = run(converter(), [created(), text_delta("Hi"), completed(message("Hi"))])
    assert all("usage" not in c for c in chunks)


def test_usage_chunk_left_out_when_upstream_sends_no_usage() -> None:
    chunks = run(converter(usage=True), [created(), completed(usage=None)])
    assert deltas(chunks) == [ROLE, ({}, "stop")]


def test_role_chunk_is_sent_lazily_when_created_is_missing() -> None:
    chunks = run(converter(), [text_delta("x"), completed(message("x"))])
    assert deltas(chunks) == [ROLE, ({"content": "x"}, None), ({}, "stop")]


def test_terminal_event_alone_still_starts_with_the_role() -> None:
    conv = converter()
    assert deltas(run(conv, [completed()])) == [ROLE, ({}, "stop")]


def test_parallel_tool_calls() -> None:
    chunks = run(converter(), [
        created(),
        ev("response.output_item.added", output_index=0, item={"id": "rs_1", "type": "reasoning",
                                                               "summary": []}),
        ev("response.output_item.added", output_index=1, item=fcall("call_a", "grep")),
        args_delta('{"p":', 1), args_delta('"foo"}', 1),
        ev("response.function_call_arguments.done", item_id="fc", output_index=1,
           arguments='{"p":"foo"}'),
        ev("response.output_item.done", output_index=1,
           item=fcall("call_a", "grep", '{"p":"foo"}')),
        ev("response.output_item.added", output_index=2, item=fcall("call_b", "ls")),
        args_delta("{}", 2),
        ev("response.output_item.done", output_index=2, item=fcall("call_b", "ls", "{}")),
        completed({"id": "rs_1", "type": "reasoning", "summary": []},
                  fcall("call_a", "grep", '{"p":"foo"}'), fcall("call_b", "ls", "{}")),
    ])  # fmt: skip
    assert deltas(chunks) == [
        ROLE,
        ({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                          "function": {"name": "grep", "arguments": ""}}]}, None),
        ({"tool_calls": [{"index": 0, "function": {"arguments": '{"p":'}}]}, None),
        ({"tool_calls": [{"index": 0, "function": {"arguments": '"foo"}'}}]}, None),
        ({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                          "function": {"name": "ls", "arguments": ""}}]}, None),
        ({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}, None),
        ({}, "tool_calls"),
    ]  # fmt: skip


def test_arguments_only_in_the_done_event_are_sent_once() -> None:
    chunks = run(converter(), [
        created(),
        ev("response.output_item.added", output_index=0, item=fcall("c", "f")),
        ev("response.function_call_arguments.done", item_id="fc", output_index=0,
           arguments='{"a":1}'),
        ev("response.output_item.done", output_index=0, item=fcall("c", "f", '{"a":1}')),
        completed(fcall("c", "f", '{"a":1}')),
    ])  # fmt: skip
    assert deltas(chunks)[2:] == [
        ({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":1}'}}]}, None),
        ({}, "tool_calls"),
    ]


def test_function_call_only_in_the_final_response() -> None:
    chunks = run(converter(), [created(), completed(message("Calling."), fcall("c", "f", "{}"))])
    assert deltas(chunks) == [
        ROLE,
        ({"content": "Calling."}, None),
        ({"tool_calls": [{"index": 0, "id": "c", "type": "function",
                          "function": {"name": "f", "arguments": ""}}]}, None),
        ({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}, None),
        ({}, "tool_calls"),
    ]  # fmt: skip


def test_final_output_that_lost_an_item_does_not_repeat_streamed_output() -> None:
    # Streamed at output_index 1 and 2; the final response lacks the reasoning item at 0.
    chunks = run(converter(), [
        created(),
        ev("response.output_item.added", output_index=1, item=message()),
        text_delta("Hi", output_index=1),
        ev("response.output_item.added", output_index=2, item=fcall("c", "f")),
        args_delta("{}", 2),
        completed(message("Hi"), fcall("c", "f", "{}")),
    ])  # fmt: skip
    assert deltas(chunks) == [
        ROLE,
        ({"content": "Hi"}, None),
        ({"tool_calls": [{"index": 0, "id": "c", "type": "function",
                          "function": {"name": "f", "arguments": ""}}]}, None),
        ({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}, None),
        ({}, "tool_calls"),
    ]  # fmt: skip


def test_function_call_first_seen_in_item_done() -> None:
    chunks = run(converter(), [ev("response.output_item.done", output_index=0,
                                  item=fcall("c", "f", "{}"))])  # fmt: skip
    assert deltas(chunks) == [
        ROLE,
        ({"tool_calls": [{"index": 0, "id": "c", "type": "function",
                          "function": {"name": "f", "arguments": ""}}]}, None),
        ({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}, None),
    ]  # fmt: skip


def test_refusal_deltas() -> None:
    chunks = run(converter(), [
        created(),
        ev("response.refusal.delta", item_id="m", output_index=0, content_index=0, delta="No"),
        ev("response.refusal.delta", item_id="m", output_index=0, content_index=0, delta="pe."),
        ev("response.refusal.done", item_id="m", output_index=0, content_index=0, refusal="Nope."),
        completed({"id": "m", "type": "message", "status": "completed", "role": "assistant",
                   "content": [{"type": "refusal", "refusal": "Nope."}]}),
    ])  # fmt: skip
    assert deltas(chunks) == [ROLE, ({"refusal": "No"}, None), ({"refusal": "pe."}, None),
                              ({}, "stop")]  # fmt: skip


def _summary_events() -> list[tuple[str, dict[str, Any]]]:
    def delta(d: str, i: int) -> Event:
        return ev("response.reasoning_summary_text.delta", item_id="rs_1", output_index=0,
                  summary_index=i, delta=d)  # fmt: skip

    reasoning = {"id": "rs_1", "type": "reasoning",
                 "summary": [{"type": "summary_text", "text": "**A**"},
                             {"type": "summary_text", "text": "B."}]}  # fmt: skip
    return [
        created(),
        delta("**A", 0), delta("**", 0),
        ev("response.reasoning_summary_text.done", item_id="rs_1", output_index=0,
           summary_index=0, text="**A**"),
        delta("B.", 1),
        ev("response.output_item.done", output_index=0, item=reasoning),
        text_delta("answer", output_index=1),
        completed(reasoning, message("answer")),
    ]  # fmt: skip


def test_reasoning_summaries_stream_as_reasoning_content_when_enabled() -> None:
    chunks = run(converter(summaries=True), _summary_events())
    assert deltas(chunks) == [
        ROLE,
        ({"reasoning_content": "**A"}, None),
        ({"reasoning_content": "**"}, None),
        ({"reasoning_content": "\n\nB."}, None),
        ({"content": "answer"}, None),
        ({}, "stop"),
    ]


def test_reasoning_summaries_are_dropped_when_disabled() -> None:
    chunks = run(converter(summaries=False), _summary_events())
    assert deltas(chunks) == [ROLE, ({"content": "answer"}, None), ({}, "stop")]


def test_several_message_items_share_choice_zero() -> None:
    chunks = run(converter(), [
        created(), text_delta("Let me check. ", 0), text_delta("Found it.", 1),
        completed(message("Let me check. "), message("Found it.", item_id="msg_2")),
    ])  # fmt: skip
    assert {c["choices"][0]["index"] for c in chunks} == {0}
    assert deltas(chunks)[1:3] == [({"content": "Let me check. "}, None),
                                   ({"content": "Found it."}, None)]  # fmt: skip


@pytest.mark.parametrize(
    ("streamed", "done_text", "extra"),
    [
        ([], "whole", ["whole"]),  # never streamed: sent at .done
        (["who"], "whole", ["le"]),  # the done text extends the deltas: the tail is sent
        (["pong"], "REDACTED", []),  # contradicts what was sent: the deltas stand
        (["same"], "same", []),
    ],
)
def test_text_catch_up_at_done(streamed: list[str], done_text: str, extra: list[str]) -> None:
    chunks = run(converter(), [created(), *[text_delta(s) for s in streamed],
                               text_done(done_text), completed(message(done_text))])  # fmt: skip
    assert [d["content"] for d, _ in deltas(chunks)[1:-1]] == streamed + extra


def test_text_only_in_final_response_is_sent_before_the_finish_chunk() -> None:
    chunks = run(converter(), [created(), completed(message("late"))])
    assert deltas(chunks) == [ROLE, ({"content": "late"}, None), ({}, "stop")]


@pytest.mark.parametrize(
    ("reason", "finish"), [("max_output_tokens", "length"), ("content_filter", "content_filter")]
)
def test_incomplete(reason: str, finish: str) -> None:
    conv = converter()
    terminal = ev(
        "response.incomplete",
        response=resp(message("Par"), status="incomplete", incomplete_details={"reason": reason}),
    )
    chunks = run(conv, [created(), text_delta("Par"), terminal])  # fmt: skip
    assert deltas(chunks)[-1] == ({}, finish)
    assert conv.finished
    assert conv.finish_reason == finish
    assert conv.final_response == terminal[1]["response"]


def test_incomplete_for_an_unknown_reason_fails() -> None:
    terminal = ev(
        "response.incomplete",
        response=resp(status="incomplete", incomplete_details={"reason": "new"}),
    )
    with pytest.raises(UpstreamFailed, match="incomplete"):
        run(converter(), [created(), terminal])  # fmt: skip


def test_state_after_completion_and_later_events_are_ignored() -> None:
    conv = converter()
    assert (conv.finished, conv.final_response, conv.finish_reason) == (False, None, None)
    run(conv, [created(), text_delta("x"), completed(message("x"))])
    assert conv.finished is True
    assert conv.finish_reason == "stop"
    assert conv.final_response is not None
    assert conv.final_response["status"] == "completed"
    assert conv.feed(decode(*text_delta("more"))) == []
    assert conv.feed(decode(*completed(message("y")))) == []
    assert conv.finish_reason == "stop"


def test_response_failed_raises_upstream_failed() -> None:
    failed = ev(
        "response.failed",
        response=resp(
            status="failed", error={"code": "server_error", "message": "The model crashed."}
        ),
    )
    with pytest.raises(UpstreamFailed) as info:
        run(converter(), [created(), text_delta("x"), failed])  # fmt: skip
    assert info.value.code == "server_error"
    assert "The model crashed." in info.value.message


def test_error_event_raises_upstream_failed() -> None:
    error = ev("error", code="rate_limit_exceeded", message="Slow down.", param=None)
    with pytest.raises(UpstreamFailed) as info:
        run(converter(), [created(), error])
    assert info.value.code == "rate_limit_exceeded"
    assert "Slow down." in info.value.message


def test_unknown_and_uninteresting_events_produce_nothing() -> None:
    conv = converter()
    run(conv, [created()])
    for event in [
        ev("response.brand_new_event", anything=1),
        ev("response.in_progress", response=resp(status="in_progress")),
        ev("response.content_part.added", item_id="m", output_index=0, content_index=0,
           part={"type": "output_text", "text": "", "annotations": []}),
        ev("response.reasoning_summary_part.added", item_id="r", output_index=0, summary_index=0,
           part={"type": "summary_text", "text": ""}),
        ev("response.output_item.added", output_index=0,
           item={"id": "rs", "type": "reasoning", "summary": []}),
    ]:  # fmt: skip
        assert conv.feed(decode(*event)) == []


@pytest.mark.parametrize(
    "event",
    [
        ev("response.created"),
        ev("response.output_text.delta", output_index=0, content_index=0),
        ev("response.output_text.delta", output_index="0", content_index=0, delta="x"),
        ev("response.output_text.delta", output_index=0, delta="x"),
        ev("response.output_text.done", output_index=0, content_index=0),
        ev("response.refusal.delta", output_index=0, content_index=0, delta=5),
        ev("response.reasoning_summary_text.delta", output_index=0, delta="x"),
        ev("response.output_item.added", item={"type": "message"}),
        ev("response.output_item.added", output_index=0, item="x"),
        ev("response.output_item.added", output_index=0, item={"id": "x"}),
        ev("response.output_item.added", output_index=0,
           item={"type": "function_call", "name": "f"}),
        ev("response.output_item.done", output_index=0,
           item={"type": "function_call", "call_id": "c", "name": "f"}),
        ev("response.output_item.done", output_index=0, item={"type": "message"}),
        ev("response.function_call_arguments.delta", output_index=7, delta="{}"),
        ev("response.completed"),
        ev("response.completed", response={"status": "completed"}),
        ev("response.completed", response={"output": []}),
    ],
)  # fmt: skip
def test_malformed_known_events(event: tuple[str, dict[str, Any]]) -> None:
    with pytest.raises(UpstreamProtocolError):
        converter().feed(decode(*event))


def test_argument_delta_without_its_call_is_a_protocol_error() -> None:
    conv = converter()
    conv.feed(decode(*ev("response.output_item.added", output_index=0, item=fcall("c", "f"))))
    conv.feed(decode(*args_delta("{", 0)))
    with pytest.raises(UpstreamProtocolError, match="output 1"):
        conv.feed(decode(*args_delta("{", 1)))
