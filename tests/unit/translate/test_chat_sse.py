"""relay.translate.chat_sse: downstream Chat Completions SSE frames.

Every frame is exactly what encoding the whole chunk gives, whether it came from a text
delta's per-stream template or from the encoder.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.core.responses_events import decode
from relay.translate.chat_sse import DONE, KEEPALIVE, compact_json, encode_chunk, encode_error
from relay.translate.stream_converter import ChatStreamConverter
from relay.transport.sse import SSEParser, decode_event
from tests.support import recordings


def test_encode_chunk_is_one_compact_data_line() -> None:
    chunk = {"id": "c", "choices": [{"delta": {"content": 'a\nb\r"é\u2028'}}]}
    frame = encode_chunk(chunk)
    expected = 'data: {"id":"c","choices":[{"delta":{"content":"a\\nb\\r\\"é\u2028"}}]}\n\n'
    assert frame == expected.encode()
    assert frame.count(b"\n") == 2
    assert json.loads(frame[len(b"data: ") :]) == chunk


def test_encode_error_done_and_keepalive() -> None:
    envelope = {"error": {"message": "m", "type": "upstream_error", "param": None, "code": "x"}}
    assert encode_error(envelope) == (
        b'data: {"error":{"message":"m","type":"upstream_error","param":null,"code":"x"}}\n\n'
    )
    assert DONE == b"data: [DONE]\n\n"
    assert KEEPALIVE.startswith(b":")
    assert KEEPALIVE.endswith(b"\n\n")
    with pytest.raises(TypeError):
        encode_error({"message": "not an envelope"})


@pytest.mark.parametrize("allow_nan", [False, True])
def test_compact_json_is_the_compact_stdlib_encoding(allow_nan: bool) -> None:
    value = {"b": [1, 2.5, None, True, "é\n\u2028"], "a": {"x": -0.0}}
    expected = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    assert compact_json(allow_nan=allow_nan)(value) == expected
    nan = {"n": float("nan")}
    if allow_nan:
        assert compact_json(allow_nan=True)(nan) == '{"n":NaN}'
    else:
        with pytest.raises(ValueError, match="not JSON compliant"):
            compact_json(allow_nan=False)(nan)


# A text delta's frame comes from a per-stream template (see chat_sse); every frame must be
# what encoding the whole chunk gives.


def whole_frame(chunk: Any) -> bytes:
    text = json.dumps(chunk, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return b"data: " + text.encode("utf-8") + b"\n\n"


def framing(encode: Any, chunk: Any) -> Any:
    try:
        return encode(chunk)
    except (UnicodeEncodeError, ValueError, TypeError) as error:
        return type(error)


PERTURBATIONS: list[tuple[str, Any]] = [
    # (path, value): set the value at the path; "-" as value removes the key
    ("created", True), ("created", 1.0), ("created", "1"), ("id", 1), ("id", True), ("id", 1.0),
    ("model", None), ("model", False), ("model", 0),
    ("object", "x"), ("usage", None), ("usage", {"total_tokens": 1}), ("usage", 0),
    ("choices", []), ("choices", "twice"), ("choices.0.index", False), ("choices.0.index", 0.0),
    ("choices.0.index", 1), ("choices.0.finish_reason", "stop"), ("choices.0.logprobs", []),
    ("choices.0.logprobs", "-"), ("choices.0.delta", {}), ("choices.0.delta.role", "assistant"),
    ("choices.0.delta", {1: "x"}), ("choices.0.delta", {True: "x"}),
    ("choices.0.delta.content", None), ("choices.0.delta.content", 1),
    ("choices.0.delta.content", "\ud800"), ("choices.0.delta.content", '\n\r"\\\u2028'),
    ("reversed", "choices.0"), ("reversed", ""), ("extra", "system_fingerprint"),
]  # fmt: skip


@st.composite
def chunk_like(draw: st.DrawFn) -> dict[str, Any]:
    """A text-delta chunk of the converter's shape with a few perturbations: other types
    that compare equal (1, 1.0, True), other keys and key orders, finish reasons, usage,
    lone surrogates."""
    kind = draw(st.sampled_from(["content", "reasoning_content", "refusal"]))
    choice: dict[str, Any] = {"index": 0, "delta": {kind: draw(st.text(max_size=6))},
                              "finish_reason": None, "logprobs": None}  # fmt: skip
    chunk: dict[str, Any] = {"id": draw(st.sampled_from(["chatcmpl-9", 'é"\n'])),
                             "object": "chat.completion.chunk", "created": 42,
                             "model": "gpt-5", "choices": [choice]}  # fmt: skip
    for path, value in draw(st.lists(st.sampled_from(PERTURBATIONS), max_size=2)):
        if path == "reversed":
            target = chunk if not value else choice
            items = list(reversed(target.items()))
            target.clear()
            target.update(items)
        elif path == "extra":
            chunk[value] = None
        elif value == "twice":
            chunk["choices"] = [choice, choice]
        else:
            *parents, key = path.replace("content", kind).split(".")
            target = chunk
            for name in parents:  # "choices.0" is the choice, in the chunk or not
                target = choice if name == "0" else target if name == "choices" else target[name]
            if value == "-":
                target.pop(key, None)
            else:
                target[key] = value
    return chunk


@given(st.lists(chunk_like(), min_size=1, max_size=6))
@settings(max_examples=400, deadline=None)
def test_every_frame_is_the_whole_chunk_encoded(chunks: list[dict[str, Any]]) -> None:
    for chunk in chunks:  # one after another: templates made for one chunk serve the next
        assert framing(encode_chunk, chunk) == framing(whole_frame, chunk), chunk


def test_templates_never_mix_equal_values_of_other_types() -> None:
    def text_chunk(created: Any, index: Any) -> dict[str, Any]:
        choice = {"index": index, "delta": {"content": "x"}, "finish_reason": None,
                  "logprobs": None}  # fmt: skip
        return {"id": "t", "object": "o", "created": created, "model": "m", "choices": [choice]}

    for created, index in [(1, 0), (True, 0), (1.0, 0), (1, False), (1, 0.0), (1, 0)]:
        chunk = text_chunk(created, index)
        assert encode_chunk(chunk) == whole_frame(chunk)


@pytest.mark.parametrize("usage", [False, True])
@pytest.mark.parametrize("summaries", [False, True])
def test_recorded_streams_frame_as_whole_chunks(usage: bool, summaries: bool) -> None:
    frames = 0
    for path in recordings.stream_paths():  # raises if there are none
        conv = ChatStreamConverter(completion_id="chatcmpl-9", created=42, model="gpt-5",
                                   include_usage=usage, reasoning_summaries=summaries)  # fmt: skip
        parser = SSEParser(max_event_bytes=1 << 24)
        for event in [*parser.feed(path.read_bytes()), *parser.close()]:
            for chunk in conv.feed(decode(*decode_event(event))):
                assert encode_chunk(chunk) == whole_frame(chunk)
                frames += 1
    assert frames > 400
