"""Custom (freeform / grammar) tools through the translation, both request shapes.

Requests: Chat custom tools, tool choices and calls become Responses ones; a Responses-shaped
(Cursor) body keeps its custom tools and has each custom call and result sent upstream in
its own kind. Answers: a ``custom_tool_call`` item reaches the client as a Chat tool call,
in JSON and streamed, its raw input byte for byte, in the function form or the Chat API's
custom form.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat.chat_completion_message_custom_tool_call import (
    ChatCompletionMessageCustomToolCall,
)

from relay.core.responses_events import decode
from relay.errors import InvalidRequest
from relay.settings.custom_calls import CustomCallForm
from relay.settings.model_alias import ModelAlias
from relay.translate import translate_request
from relay.translate.chat_sse import encode_chunk
from relay.translate.responses_input import resolve_tool_calls
from relay.translate.responses_to_chat import response_to_chat_completion
from relay.translate.stream_converter import ChatStreamConverter, Chunk
from tests.unit.translate.test_stream_converter import (
    ROLE,
    args_delta,
    completed,
    created,
    deltas,
    ev,
    fcall,
    resp,
)

GPT5 = ModelAlias("gpt-5", "gpt-5")
# A patch as a model writes it: not JSON; quotes, a backslash, a tab, CRLF, non-ASCII.
PATCH = '*** Begin Patch\n*** Update File: caf\u00e9.py\n@@ "q" \\ \t\r\n+x = {1: 2}\n*** End Patch'
LARK = {"syntax": "lark", "definition": 'start: "*** Begin Patch" /(.|\\n)*/'}


def chat_body(*messages: dict[str, Any], **params: Any) -> dict[str, Any]:
    return {"model": "gpt-5", "messages": list(messages), **params}


def upstream(body: dict[str, Any]) -> dict[str, Any]:
    return translate_request(body, GPT5, reasoning_summaries=False).upstream_body


# --- Chat-shaped requests --------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        ({"type": "custom", "custom": {"name": "ApplyPatch"}},
         {"type": "custom", "name": "ApplyPatch"}),
        ({"type": "custom", "custom": {"name": "Shell", "description": "run",
                                       "format": {"type": "text"}}},
         {"type": "custom", "name": "Shell", "description": "run", "format": {"type": "text"}}),
        ({"type": "custom", "custom": {"name": "ApplyPatch",
                                       "format": {"type": "grammar", "grammar": LARK}}},
         {"type": "custom", "name": "ApplyPatch", "format": {"type": "grammar", **LARK}}),
        ({"type": "custom", "custom": {"name": "Digits", "format": {
            "type": "grammar", "grammar": {"syntax": "regex", "definition": "^[0-9]+$"}}}},
         {"type": "custom", "name": "Digits",
          "format": {"type": "grammar", "syntax": "regex", "definition": "^[0-9]+$"}}),
    ],
)  # fmt: skip
def test_chat_custom_tools_become_responses_custom_tools(tool: Any, expected: Any) -> None:
    body = chat_body({"role": "user", "content": "hi"}, tools=[tool])
    assert upstream(body)["tools"] == [expected]


def test_a_tool_choice_naming_a_custom_tool() -> None:
    tool = {"type": "custom", "custom": {"name": "ApplyPatch"}}
    choice = {"type": "custom", "custom": {"name": "ApplyPatch"}}
    body = chat_body({"role": "user", "content": "hi"}, tools=[tool], tool_choice=choice)
    assert upstream(body)["tool_choice"] == {"type": "custom", "name": "ApplyPatch"}
    with pytest.raises(InvalidRequest, match=r"tool_choice\.custom\.name"):
        upstream({**body, "tool_choice": {"type": "custom", "custom": {}}})


def test_chat_history_custom_calls_and_their_results_go_up_in_their_kind() -> None:
    calls = [
        {"id": "call_p", "type": "custom", "custom": {"name": "ApplyPatch", "input": PATCH}},
        {"id": "call_f", "type": "function", "function": {"name": "read", "arguments": "{}"}},
    ]
    body = chat_body(
        {"role": "user", "content": "edit"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_p", "content": "Done!"},
        {"role": "tool", "tool_call_id": "call_f", "content": "text"},
    )
    assert upstream(body)["input"][1:] == [
        {"type": "custom_tool_call", "call_id": "call_p", "name": "ApplyPatch", "input": PATCH},
        {"type": "function_call", "call_id": "call_f", "name": "read", "arguments": "{}"},
        {"type": "custom_tool_call_output", "call_id": "call_p", "output": "Done!"},
        {"type": "function_call_output", "call_id": "call_f", "output": "text"},
    ]


@pytest.mark.parametrize(
    ("call", "param"),
    [
        ({"id": "c", "type": "custom"}, "messages[1].tool_calls[0].custom"),
        ({"id": "c", "type": "custom", "custom": {"input": ""}},
         "messages[1].tool_calls[0].custom.name"),
        ({"id": "c", "type": "custom", "custom": {"name": "P", "input": {"a": 1}}},
         "messages[1].tool_calls[0].custom.input"),
    ],
)  # fmt: skip
def test_malformed_custom_calls_name_the_path(call: Any, param: str) -> None:
    body = chat_body({"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [call]})
    with pytest.raises(InvalidRequest) as info:
        upstream(body)
    assert info.value.param == param


def test_a_tool_message_answering_no_earlier_call_is_refused_naming_it() -> None:
    call = {"id": "call_1", "type": "custom", "custom": {"name": "P", "input": ""}}
    body = chat_body(
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "call_1", "content": "early"},  # before its call
        {"role": "assistant", "tool_calls": [call]},
    )
    with pytest.raises(InvalidRequest) as info:
        upstream(body)
    assert info.value.param == "messages[1].tool_call_id"
    assert "answers tool call 'call_1', which no earlier assistant message made" in str(info.value)


def test_the_chat_shape_always_answers_in_the_custom_form() -> None:
    body = chat_body({"role": "user", "content": "hi"})
    for form in ("function", "custom"):
        request = translate_request(body, GPT5, reasoning_summaries=False, custom_tool_calls=form)
        assert request.custom_tool_calls == "custom"


# --- Responses-shaped (Cursor) requests ------------------------------------------------

CURSOR_TOOLS = [
    {"type": "function", "name": "read_file", "parameters": {"type": "object"}},
    {"type": "custom", "name": "ApplyPatch", "format": {"type": "grammar", **LARK}},
]
USER = {"role": "user", "content": "edit"}
AS_FUNCTION = {"type": "function_call", "call_id": "call_p", "name": "ApplyPatch",
               "arguments": PATCH}  # fmt: skip
AS_CUSTOM = {"type": "custom_tool_call", "call_id": "call_p", "name": "ApplyPatch",
             "input": PATCH}  # fmt: skip
READ = {"type": "function_call", "call_id": "call_r", "name": "read_file", "arguments": "{}"}


def output(kind: str, call_id: str, text: str = "Done!") -> dict[str, Any]:
    return {"type": kind, "call_id": call_id, "output": text}


@pytest.mark.parametrize("call", [AS_FUNCTION, AS_CUSTOM], ids=["function_call", "custom"])
@pytest.mark.parametrize("answer", ["function_call_output", "custom_tool_call_output"])
def test_cursor_echoes_of_a_custom_call_go_up_as_custom_items(call: Any, answer: str) -> None:
    items = [USER, call, READ, output(answer, "call_p"), output(answer, "call_r", "x"), USER]
    body = {"model": "gpt-5", "input": items, "tools": CURSOR_TOOLS}
    sent = upstream(body)
    assert sent["tools"] == CURSOR_TOOLS  # custom tools pass through
    assert sent["input"] == [
        USER, AS_CUSTOM, READ, output("custom_tool_call_output", "call_p"),
        output("function_call_output", "call_r", "x"), USER,
    ]  # fmt: skip
    assert body["input"][1] == call  # the client's body is untouched


def test_a_function_call_to_a_function_tool_is_left_alone() -> None:
    items = [USER, READ, output("function_call_output", "call_r")]
    assert resolve_tool_calls(items, frozenset({"ApplyPatch"})) == items


@pytest.mark.parametrize(
    ("items", "param", "fragment"),
    [
        ([USER, output("function_call_output", "call_x")], "input[1]",
         "answers call_id 'call_x', which no earlier function_call or custom_tool_call"),
        ([USER, output("custom_tool_call_output", "call_p"), AS_CUSTOM], "input[1]",
         "answers call_id 'call_p'"),
        ([USER, AS_FUNCTION, USER], "input[1]",
         "call of custom tool 'ApplyPatch' (call_id 'call_p') with no result before 'input[2]'"),
        ([USER, AS_CUSTOM, READ, output("function_call_output", "call_r"), USER], "input[1]",
         "with no result before 'input[4]'"),
    ],
)  # fmt: skip
def test_unresolvable_pairings_are_refused_naming_the_item(
    items: list[Any], param: str, fragment: str
) -> None:
    with pytest.raises(InvalidRequest) as info:
        upstream({"model": "gpt-5", "input": items, "tools": CURSOR_TOOLS})
    assert info.value.param == param
    assert fragment in str(info.value)


def test_trailing_custom_calls_may_await_their_results() -> None:
    items = [USER, {"type": "reasoning", "summary": []}, AS_FUNCTION]
    assert resolve_tool_calls(items, frozenset({"ApplyPatch"}))[2] == AS_CUSTOM


# --- answers: JSON ----------------------------------------------------------------------


def ctc(call_id: str, name: str, text: str = "") -> dict[str, Any]:
    return {"id": "ctc_" + call_id, "type": "custom_tool_call", "call_id": call_id,
            "input": text, "name": name}  # fmt: skip


def answer(form: CustomCallForm, *output: dict[str, Any]) -> dict[str, Any]:
    completion = response_to_chat_completion(
        resp(*output), completion_id="c", created=1, model="gpt-5", reasoning_summaries=False,
        custom_tool_calls=form,
    )  # fmt: skip
    return dict(completion)


def test_json_custom_call_in_the_function_form() -> None:
    completion = answer("function", ctc("call_p", "ApplyPatch", PATCH))
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"] == [
        {"id": "call_p", "type": "function",
         "function": {"name": "ApplyPatch", "arguments": PATCH}},
    ]  # fmt: skip
    ChatCompletion.model_validate(completion, strict=True)


def test_json_custom_call_in_the_custom_form_is_the_sdks_custom_tool_call() -> None:
    output = [ctc("call_p", "ApplyPatch", PATCH), fcall("call_r", "read_file", "{}")]
    completion = answer("custom", *output)
    parsed = ChatCompletion.model_validate(completion, strict=True)
    custom, function = parsed.choices[0].message.tool_calls or []
    assert isinstance(custom, ChatCompletionMessageCustomToolCall)
    assert (custom.id, custom.custom.name, custom.custom.input) == ("call_p", "ApplyPatch", PATCH)
    assert function.type == "function"
    assert parsed.choices[0].finish_reason == "tool_calls"


# --- answers: the stream ----------------------------------------------------------------


def converter(form: CustomCallForm) -> ChatStreamConverter:
    return ChatStreamConverter(completion_id="chatcmpl-9", created=42, model="gpt-5",
                               include_usage=False, reasoning_summaries=False,
                               custom_tool_calls=form)  # fmt: skip


def feed(conv: ChatStreamConverter, events: list[tuple[str, dict[str, Any]]]) -> list[Chunk]:
    chunks: list[Chunk] = []
    for event_type, data in events:
        chunks += conv.feed(decode(event_type, data))
    return chunks


def input_delta(delta: str, output_index: int) -> tuple[str, dict[str, Any]]:
    return ev("response.custom_tool_call_input.delta", item_id="ctc_call_p",
              output_index=output_index, delta=delta)  # fmt: skip


def custom_stream(
    pieces: list[str], *, done: str | None = None
) -> list[tuple[str, dict[str, Any]]]:
    item = ctc("call_p", "ApplyPatch")
    whole = "".join(pieces) if done is None else done
    return [
        created(),
        ev("response.output_item.added", output_index=0, item=item),
        *(input_delta(piece, 0) for piece in pieces),
        ev("response.custom_tool_call_input.done", item_id=item["id"], output_index=0,
           input=whole),
        ev("response.output_item.done", output_index=0, item={**item, "input": whole}),
        completed({**item, "input": whole}),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("form", "key", "piece"), [("function", "function", "arguments"), ("custom", "custom", "input")]
)
def test_a_streamed_custom_call_is_announced_then_its_input_follows(
    form: CustomCallForm, key: str, piece: str
) -> None:
    chunks = feed(converter(form), custom_stream([PATCH[:9], PATCH[9:]]))
    if form == "function":  # the SDK's chunk type models the function form only
        for chunk in chunks:
            ChatCompletionChunk.model_validate(chunk, strict=True)
    assert deltas(chunks) == [
        ROLE,
        ({"tool_calls": [{"index": 0, "id": "call_p", "type": form,
                          key: {"name": "ApplyPatch", piece: ""}}]}, None),
        ({"tool_calls": [{"index": 0, key: {piece: PATCH[:9]}}]}, None),
        ({"tool_calls": [{"index": 0, key: {piece: PATCH[9:]}}]}, None),
        ({}, "tool_calls"),
    ]  # fmt: skip


def tool_deltas(chunks: list[Chunk]) -> list[dict[str, Any]]:
    """Each chunk's (only) tool-call delta, as plain JSON."""
    return [dict(d["tool_calls"][0]) for d, _ in deltas(chunks) if d.get("tool_calls")]


@pytest.mark.parametrize("form", ["function", "custom"])
def test_done_and_terminal_catch_up_on_input_the_deltas_left_out(form: CustomCallForm) -> None:
    key = "function" if form == "function" else "custom"
    piece = "arguments" if form == "function" else "input"
    # Only the first piece streamed: the .done event sends the rest.
    chunks = feed(converter(form), custom_stream([PATCH[:5]], done=PATCH))
    sent = [call[key][piece] for call in tool_deltas(chunks)]
    assert "".join(sent) == PATCH and sent[-1] == PATCH[5:]
    # Only the terminal response holds the call: announced, then its whole input.
    chunks = feed(converter(form), [created(), completed(ctc("call_p", "ApplyPatch", PATCH))])
    calls = tool_deltas(chunks)
    assert calls[0]["id"] == "call_p" and calls[1][key] == {piece: PATCH}
    assert deltas(chunks)[-1] == ({}, "tool_calls")


def test_an_input_delta_for_no_announced_call_is_a_protocol_error() -> None:
    from relay.errors import UpstreamProtocolError

    with pytest.raises(UpstreamProtocolError, match="not an announced function or custom"):
        feed(converter("function"), [created(), input_delta("x", 3)])


def test_custom_and_function_calls_interleave_by_index() -> None:
    events = [
        created(),
        ev("response.output_item.added", output_index=0, item=fcall("call_r", "read_file")),
        ev("response.output_item.added", output_index=1, item=ctc("call_p", "ApplyPatch")),
        input_delta("*** ", 1),
        args_delta("{}", 0),
        completed(fcall("call_r", "read_file", "{}"), ctc("call_p", "ApplyPatch", "*** ")),
    ]
    chunks = feed(converter("custom"), events)
    indexed = [(d["tool_calls"][0]["index"], d["tool_calls"][0]) for d, _ in deltas(chunks)
               if d.get("tool_calls")]  # fmt: skip
    assert [index for index, _ in indexed] == [0, 1, 1, 0]
    assert indexed[2][1] == {"index": 1, "custom": {"input": "*** "}}


@given(
    text=st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=60),
    cuts=st.lists(st.integers(0, 60), max_size=6),
    form=st.sampled_from(["function", "custom"]),
)
def test_any_split_of_any_input_reaches_the_client_byte_for_byte(
    text: str, cuts: list[int], form: CustomCallForm
) -> None:
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    chunks = feed(converter(form), custom_stream(pieces))
    key, piece = ("function", "arguments") if form == "function" else ("custom", "input")
    # What the client reads: each frame's JSON, as sent on the wire.
    frames = [json.loads(encode_chunk(chunk)[len(b"data: ") :]) for chunk in chunks]
    sent = "".join(
        call[key].get(piece, "")
        for frame in frames
        for call in frame["choices"][0]["delta"].get("tool_calls", [])
    )
    assert sent == text
