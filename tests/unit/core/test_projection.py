"""relay.core.projection: what a client accumulates from the chunks (or one completion),
and every shape it could read more than one way, which makes the projection unknown."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.core.predict import SentToolCall
from relay.core.projection import ClientProjection, utf8_length


def chunk(delta: dict[str, Any], finish: str | None = None, index: Any = 0) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": index, "delta": delta, "finish_reason": finish}]}  # fmt: skip


def call(index: Any, **fields: Any) -> dict[str, Any]:
    return {"index": index, **fields}


def fed(*chunks: dict[str, Any], max_bytes: int | None = 1 << 20) -> ClientProjection:
    projection = ClientProjection(max_bytes=max_bytes)
    for c in chunks:
        projection.feed_chunk(c)
    return projection


def test_text_and_finish_accumulate_as_a_client_reads_them() -> None:
    p = fed(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hel"}),
        chunk({"content": "lo", "reasoning_content": "ignored: not in the envelope"}),
        chunk({}, finish="stop"),
        {"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": {}},
    )
    assert (p.text, p.refusal, p.tool_calls, p.finish_reason, p.known) == (
        "Hello", None, (), "stop", True,
    )  # fmt: skip


def test_tool_calls_join_their_arguments_in_index_order() -> None:
    p = fed(
        chunk({"tool_calls": [call(1, id="call_b", type="function",
                                   function={"name": "b", "arguments": ""})]}),
        chunk({"tool_calls": [call(0, id="call_a", type="function",
                                   function={"name": "a", "arguments": '{"x"'})]}),
        chunk({"tool_calls": [call(0, function={"arguments": ":1}"})]}),
        chunk({}, finish="tool_calls"),
    )  # fmt: skip
    assert p.tool_calls == (SentToolCall("call_a", "a", '{"x":1}'), SentToolCall("call_b", "b", ""))
    assert p.known


def test_a_refusal_is_kept_apart_from_text() -> None:
    p = fed(chunk({"refusal": "I can't"}), chunk({"refusal": " help."}, finish="stop"))
    assert (p.text, p.refusal, p.known) == ("", "I can't help.", True)


AMBIGUOUS = [
    ("a second choice", chunk({"content": "x"}, index=1)),
    ("a bool choice index", chunk({"content": "x"}, index=True)),
    ("choices not a list", {"choices": {"0": {}}}),
    ("a choice not an object", {"choices": ["x"]}),
    ("a delta not an object", {"choices": [{"index": 0, "delta": "x"}]}),
    ("an unknown delta field", chunk({"audio": {"id": "a"}})),
    ("a non-assistant role", chunk({"role": "user", "content": "x"})),
    ("content not a string", chunk({"content": ["x"]})),
    ("a finish reason not a string", chunk({}, finish=1)),  # type: ignore[arg-type]
    ("a call not an object", chunk({"tool_calls": ["x"]})),
    ("a call without an index", chunk({"tool_calls": [{"id": "c", "function": {"name": "f"}}]})),
    ("a call of another type",
     chunk({"tool_calls": [call(0, id="c", type="custom", function={"name": "f"})]})),
    ("a call's function not an object", chunk({"tool_calls": [call(0, id="c", function="f")]})),
]  # fmt: skip


@pytest.mark.parametrize(("why", "odd"), AMBIGUOUS)
def test_anything_a_client_could_read_two_ways_is_unknown(why: str, odd: dict[str, Any]) -> None:
    assert not fed(chunk({"content": "ok"}), odd).known, why


def test_a_second_id_or_name_for_one_call_is_unknown() -> None:
    first = chunk({"tool_calls": [call(0, id="call_a", function={"name": "a"})]})
    assert fed(first).known
    assert not fed(first, chunk({"tool_calls": [call(0, id="call_b")]})).known
    assert not fed(first, chunk({"tool_calls": [call(0, function={"name": "b"})]})).known


def test_calls_must_be_whole_and_dense() -> None:
    assert not fed(chunk({"tool_calls": [call(0, function={"name": "a"})]})).known  # no id
    assert not fed(chunk({"tool_calls": [call(0, id="call_a")]})).known  # no name
    gap = chunk({"tool_calls": [call(1, id="call_b", function={"name": "b"})]})
    assert not fed(gap).known  # index 0 never sent


def test_over_the_allowance_everything_is_dropped_and_unknown() -> None:
    p = fed(chunk({"content": "12345"}), chunk({"content": "6"}), max_bytes=5)
    assert p.exhausted and not p.known
    assert p.text == "" and p.tool_calls == ()
    assert fed(chunk({"content": "é" * 3}), max_bytes=6).known  # UTF-8 bytes, not characters
    assert not fed(chunk({"content": "é" * 3}), max_bytes=5).known
    assert fed(chunk({"content": "x" * 10_000}), max_bytes=None).known


def test_a_completion_projects_like_its_chunks() -> None:
    message = {"role": "assistant", "content": "Hi",
               "tool_calls": [{"id": "call_a", "type": "function",
                               "function": {"name": "a", "arguments": "{}"}}]}  # fmt: skip
    completion = {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
    p = ClientProjection.from_completion(completion)
    assert (p.text, p.tool_calls, p.finish_reason, p.known) == (
        "Hi", (SentToolCall("call_a", "a", "{}"),), "tool_calls", True,
    )  # fmt: skip
    odd_completions: list[dict[str, Any]] = [
        {"choices": []}, {"choices": [{"index": 0}]}, {}, {"choices": [{}, {}]},
    ]  # fmt: skip
    for odd in odd_completions:
        assert not ClientProjection.from_completion(odd).known


@given(st.text())
def test_utf8_length_counts_what_the_store_would_write(text: str) -> None:
    assert utf8_length(text) == len(text.encode("utf-8", "surrogatepass"))


@given(st.lists(st.text(max_size=20), max_size=8))
def test_text_pieces_concatenate_in_order(pieces: list[str]) -> None:
    p = fed(*(chunk({"content": piece}) for piece in pieces), max_bytes=None)
    assert p.text == "".join(pieces) and p.known
