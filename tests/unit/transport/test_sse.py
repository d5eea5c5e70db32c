"""relay.transport.sse: incremental SSE parsing and event decoding."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.errors import UpstreamProtocolError
from relay.transport.sse import (
    _SCAN,
    _SCAN_CHAT,
    SSEEvent,
    SSEParser,
    _loads,
    _reject_constant,
    decode_event,
)
from tests.support import recordings

MAX = 1 << 20


def parse(
    data: bytes, *, sizes: list[int] | None = None, max_event_bytes: int = MAX
) -> list[SSEEvent]:
    """Feed ``data`` in pieces of the given sizes (whole by default), then close."""
    parser = SSEParser(max_event_bytes=max_event_bytes)
    events: list[SSEEvent] = []
    pos = 0
    for size in sizes or [len(data)]:
        events += parser.feed(data[pos : pos + size])
        pos += size
    events += parser.feed(data[pos:])
    return events + parser.close()


def bytewise(data: bytes) -> list[SSEEvent]:
    return parse(data, sizes=[1] * len(data))


@pytest.mark.parametrize(
    ("stream", "expected"),
    [
        (b'event: response.created\ndata: {"a":1}\n\n',
         [SSEEvent("response.created", '{"a":1}')]),
        (b"data: one\n\ndata: two\n\n", [SSEEvent(None, "one"), SSEEvent(None, "two")]),
        (b"data: a\ndata: b\ndata:\n\n", [SSEEvent(None, "a\nb\n")]),
        (b"data:no-space\n\n", [SSEEvent(None, "no-space")]),
        (b"data:  two-spaces\n\n", [SSEEvent(None, " two-spaces")]),
        (b"data\n\n", [SSEEvent(None, "")]),
        (b"data: x:y: z\n\n", [SSEEvent(None, "x:y: z")]),
        (b": keepalive\n\n: another\ndata: x\n: inside\n\n", [SSEEvent(None, "x")]),
        (b"event: only-a-type\n\ndata: x\n\n", [SSEEvent(None, "x")]),  # no data: dropped
        (b"\n\n\n", []),
        (b"id: 7\nretry: 100\nfoo: bar\ndata: x\n\n", [SSEEvent(None, "x")]),
        (b"event:\ndata: x\n\n", [SSEEvent(None, "x")]),
        (b"event: a\nevent: b\ndata: x\n\n", [SSEEvent("b", "x")]),
        (b"\xef\xbb\xbfdata: bom\n\n", [SSEEvent(None, "bom")]),
        ("data: é€😀\n\n".encode(), [SSEEvent(None, "é€😀")]),
    ],
)  # fmt: skip
def test_events(stream: bytes, expected: list[SSEEvent]) -> None:
    assert parse(stream) == expected
    assert bytewise(stream) == expected


@pytest.mark.parametrize("eol", [b"\n", b"\r", b"\r\n"])
def test_line_endings(eol: bytes) -> None:
    stream = eol.join([b"event: e", b"data: a", b"data: b", b"", b": c", b"data: z", b"", b""])
    expected = [SSEEvent("e", "a\nb"), SSEEvent(None, "z")]
    assert parse(stream) == expected
    assert bytewise(stream) == expected


def test_every_split_point_gives_the_same_events() -> None:
    stream = (
        'event: x\r\ndata: {"t":"é😀"}\r\n\r\n: c\rdata: a\rdata: b\r\rdata: last\n\n'
    ).encode()
    expected = parse(stream)
    assert expected == [SSEEvent("x", '{"t":"é😀"}'), SSEEvent(None, "a\nb"),
                        SSEEvent(None, "last")]  # fmt: skip
    for i in range(len(stream) + 1):
        for j in range(i, len(stream) + 1):
            assert parse(stream, sizes=[i, j - i]) == expected, (i, j)


def test_cr_at_a_chunk_edge_followed_by_lf_is_one_line_end() -> None:
    parser = SSEParser(max_event_bytes=MAX)
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\n") == []
    assert parser.feed(b"\r") == [SSEEvent(None, "a")]
    assert parser.feed(b"\ndata: b\r\n\r\n") == [SSEEvent(None, "b")]


def test_bom_split_across_chunks() -> None:
    assert parse(b"\xef\xbb\xbfdata: x\n\n", sizes=[1, 1, 1]) == [SSEEvent(None, "x")]


@pytest.mark.parametrize(
    "stream",
    [b"data: \xff\n\n", b"data: \xc3\n\n", b"\xef\xbb", b"data: \xe2\x82"],
)
def test_invalid_utf8(stream: bytes) -> None:
    with pytest.raises(UpstreamProtocolError, match="UTF-8"):
        parse(stream)
    with pytest.raises(UpstreamProtocolError, match="UTF-8"):
        bytewise(stream)


# --- end of stream -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        (b'data: {"type":"response.completed"}\n', SSEEvent(None, '{"type":"response.completed"}')),
        (b'data: {"type":"response.completed"}', SSEEvent(None, '{"type":"response.completed"}')),
        (b'event: e\r\ndata: {"a":\r\ndata: 1}\r\n', SSEEvent("e", '{"a":\n1}')),
        (b"data: [DONE]", SSEEvent(None, "[DONE]")),
    ],
)  # fmt: skip
def test_final_event_without_blank_line_is_accepted_when_its_json_is_complete(
    tail: bytes, expected: SSEEvent
) -> None:
    stream = b"data: first\n\n" + tail
    assert parse(stream) == [SSEEvent(None, "first"), expected]
    assert bytewise(stream) == [SSEEvent(None, "first"), expected]


@pytest.mark.parametrize(
    "tail",
    [
        b'data: {"type":"response.comp',
        b'data: {"type":"x"\n',
        b"data: not json\n",
        b"data:",
        b"data: " + b"[" * 100_000,  # nested past the recursion limit: malformed, not a crash
    ],
)
def test_final_event_with_incomplete_data_is_a_protocol_error(tail: bytes) -> None:
    with pytest.raises(UpstreamProtocolError, match="middle of an event"):
        parse(b"data: first\n\n" + tail)


@pytest.mark.parametrize("tail", [b"", b"event: e\n", b": comment", b"event: x", b"\n"])
def test_nothing_pending_at_close(tail: bytes) -> None:
    assert parse(b"data: a\n\n" + tail) == [SSEEvent(None, "a")]


def test_feed_after_close_is_a_programming_error() -> None:
    parser = SSEParser(max_event_bytes=MAX)
    parser.close()
    with pytest.raises(RuntimeError):
        parser.feed(b"data: x\n\n")


# --- size limit ------------------------------------------------------------------------------


def test_event_over_the_limit() -> None:
    stream = b"data: " + b"x" * 100 + b"\n\n"
    with pytest.raises(UpstreamProtocolError, match="RELAY_MAX_SSE_EVENT_BYTES"):
        parse(stream, max_event_bytes=64)
    with pytest.raises(UpstreamProtocolError, match="RELAY_MAX_SSE_EVENT_BYTES"):
        parse(stream, sizes=[1] * len(stream), max_event_bytes=64)  # caught mid-line
    parser = SSEParser(max_event_bytes=64)
    with pytest.raises(UpstreamProtocolError, match="larger than 64 bytes"):
        parser.feed(b"data: " + b"x" * 100)  # no line end yet: buffering stops here


def test_limit_counts_all_lines_of_one_event() -> None:
    stream = b"".join(b"data: " + b"x" * 10 + b"\n" for _ in range(10)) + b"\n"
    with pytest.raises(UpstreamProtocolError):
        parse(stream, max_event_bytes=100)
    assert len(parse(stream, max_event_bytes=160)) == 1


def test_limit_is_per_event_not_per_chunk() -> None:
    stream = b"data: " + b"x" * 50 + b"\n\n"
    assert len(parse(stream * 100, max_event_bytes=64)) == 100


def test_event_exactly_at_the_limit() -> None:
    stream = b"data: " + b"x" * 58 + b"\n\n"  # 64 bytes of field line
    assert parse(stream, max_event_bytes=64) == [SSEEvent(None, "x" * 58)]
    assert parse(stream, sizes=[1] * len(stream), max_event_bytes=64) == [SSEEvent(None, "x" * 58)]
    with pytest.raises(UpstreamProtocolError):
        parse(stream, max_event_bytes=63)


# --- decode_event ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (SSEEvent("response.created", '{"type":"response.created","x":1}'),
         ("response.created", {"type": "response.created", "x": 1})),
        (SSEEvent(None, '{"type":"error","message":"m"}'),
         ("error", {"type": "error", "message": "m"})),
        (SSEEvent("response.completed", '{"response":{}}'),
         ("response.completed", {"response": {}})),
        (SSEEvent(None, "[DONE]"), ("[DONE]", {})),
    ],
)  # fmt: skip
def test_decode_event(event: SSEEvent, expected: tuple[str, dict[str, Any]]) -> None:
    assert decode_event(event) == expected


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (SSEEvent("a", '{"type":"b"}'), "says"),
        (SSEEvent(None, "{bad json"), "not valid JSON"),
        (SSEEvent(None, "[1, 2]"), "not a JSON object"),
        (SSEEvent(None, '"text"'), "not a JSON object"),
        (SSEEvent(None, "{}"), "no type"),
        (SSEEvent(None, '{"type": 5}'), "no type"),
        (SSEEvent(None, '{"type": ""}'), "no type"),
        (SSEEvent(None, '{"a":' * 100_000 + "1" + "}" * 100_000), "not valid JSON"),
    ],
)
def test_decode_event_errors(event: SSEEvent, message: str) -> None:
    with pytest.raises(UpstreamProtocolError, match=message):
        decode_event(event)


# --- whole events in one step vs line by line -------------------------------------------------
#
# The parser takes complete LF-only events in one step and everything else line by line (the
# path the tests above pin); with the one-step path switched off it must agree on every
# stream and every chunking: the same events from the same feed, the same error from the
# same feed.


class LineByLineParser(SSEParser):
    """The parser with its whole-event step switched off: every line goes line by line."""

    def _whole_events(self, events: list[SSEEvent]) -> None:
        return


FIELD_BYTES = [b"data: ", b"data:", b"data", b"event: ", b"event:", b"event", b"id: 1",
               b"retry: 5", b": c", b":", b"foo: bar", b"dat", b'{"a":1}', b"[DONE]", b"x",
               b" ", "é€😀".encode(), b"\xff", b"\xe2\x82", b"\xef\xbb\xbf"]  # fmt: skip
LINE_ENDS = [b"\n", b"\r", b"\r\n", b"\n\n", b"\r\n\r\n", b"\r\r", b"\n\r"]


@st.composite
def lf_event(draw: st.DrawFn) -> bytes:
    """One LF-terminated event of the shapes real streams send, and a few they do not."""
    data = draw(st.sampled_from(['{"type":"x","delta":"é"}', "", "[DONE]", "a: b", " lead"]))
    shape = draw(st.sampled_from(["data", "event+data", "multi", "noisy", "no-data"]))
    name = draw(st.sampled_from(["response.created", "", "e"]))
    if shape == "data":
        return f"data: {data}\n\n".encode()
    if shape == "event+data":
        return f"event: {name}\ndata: {data}\n\n".encode()
    if shape == "multi":
        return f"event:{name}\ndata:{data}\ndata\ndata:  {data}\n\n".encode()
    if shape == "noisy":
        return f": ping\nid: 3\nevent: {name}\nretry: 1\nfoo\ndata: {data}\n\n".encode()
    return f"event: {name}\n: only a comment\n\n".encode()


streams = st.one_of(
    st.lists(lf_event(), max_size=8).map(b"".join),  # the fast path's home ground
    st.lists(st.one_of(lf_event(), st.sampled_from(FIELD_BYTES), st.sampled_from(LINE_ENDS),
                       st.binary(max_size=6)), max_size=30).map(b"".join),
)  # fmt: skip


def outcomes(parser: Any, pieces: list[bytes]) -> list[Any]:
    """What each feed and the close give: events as (event, data), or the error raised."""
    result: list[Any] = []
    try:
        for piece in pieces:
            result.append([(event, data) for event, data in parser.feed(piece)])
        result.append([(event, data) for event, data in parser.close()])
    except UpstreamProtocolError as error:
        result.append(("error", str(error)))
    return result


@given(stream=streams, data=st.data(), max_event_bytes=st.sampled_from([MAX, 64, 30, 8]))
@settings(max_examples=600, deadline=None)
def test_whole_events_agree_with_the_line_by_line_parser(
    stream: bytes, data: st.DataObject, max_event_bytes: int
) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6), label="cuts"))
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    expected = outcomes(LineByLineParser(max_event_bytes=max_event_bytes), pieces)
    assert outcomes(SSEParser(max_event_bytes=max_event_bytes), pieces) == expected


def test_recorded_streams_agree_with_the_line_by_line_parser() -> None:
    for path in recordings.stream_paths():  # raises if there are none
        stream = path.read_bytes()
        for size in (1, 7, 100, 4096, len(stream)):
            pieces = [stream[i : i + size] for i in range(0, len(stream), size)]
            expected = outcomes(LineByLineParser(max_event_bytes=MAX), pieces)
            assert outcomes(SSEParser(max_event_bytes=MAX), pieces) == expected, (path, size)
        assert sum(map(len, expected)) > 10  # events came out


@pytest.mark.parametrize(
    ("pieces", "expected"),
    [
        # LF events, then a CR one in the same read: the CR part goes line by line.
        ([b"data: a\n\ndata: b\r\rdata: c\n\n"], [["a", "b", "c"], []]),
        # An event split across reads, then whole ones again in the next read.
        ([b"event: e\ndata: a", b"b\n\ndata: c\n\n"], [[], ["ab", "c"], []]),
        # A blank line split from its event: the next read starts with it.
        ([b"data: a\n", b"\ndata: b\n\n"], [[], ["a", "b"], []]),
        # Blank lines between events are nothing.
        ([b"\n\n\ndata: a\n\n\n\n\ndata: b\n\n"], [["a", "b"], []]),
        # Lines that set nothing, and an event with no data.
        ([b": x\n\nid: 1\n\nevent: e\n\ndata: a\n\n"], [["a"], []]),
    ],
)
def test_whole_events_and_line_by_line_hand_over(
    pieces: list[bytes], expected: list[list[str]]
) -> None:
    parser = SSEParser(max_event_bytes=MAX)
    got = [[event.data for event in parser.feed(piece)] for piece in pieces]
    assert [*got, [event.data for event in parser.close()]] == expected


def test_a_bad_event_after_good_ones_in_one_read_raises_from_that_read() -> None:
    parser = SSEParser(max_event_bytes=MAX)
    with pytest.raises(UpstreamProtocolError, match="UTF-8"):
        parser.feed(b"data: a\n\ndata: \xff\n\n")
    parser = SSEParser(max_event_bytes=16)
    with pytest.raises(UpstreamProtocolError, match="larger than 16 bytes"):
        parser.feed(b"data: a\n\ndata: " + b"x" * 20 + b"\n\n")
    # Field lines of 8 + 14 bytes: at the limit, not over it, whichever step takes them.
    for limit in (22, 23):
        parser = SSEParser(max_event_bytes=limit)
        assert parser.feed(b"event: e\ndata: 12345678\n\n") == [SSEEvent("e", "12345678")]
    with pytest.raises(UpstreamProtocolError, match="larger than 21 bytes"):
        SSEParser(max_event_bytes=21).feed(b"event: e\ndata: 12345678\n\n")


def test_the_callers_chunk_is_never_changed() -> None:
    parser = SSEParser(max_event_bytes=MAX)
    chunk = bytearray(b"data: a\n\ndata: b")
    assert parser.feed(chunk) == [SSEEvent(None, "a")]  # type: ignore[arg-type]
    assert chunk == b"data: a\n\ndata: b"
    assert parser.feed(b"\n\n") == [SSEEvent(None, "b")]
    assert chunk == b"data: a\n\ndata: b"


# --- event data: the scanner alone when nothing surrounds the value -----------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)  # fmt: skip
event_data = st.one_of(
    json_values.map(lambda v: json.dumps(v, ensure_ascii=False)),
    st.tuples(st.sampled_from(["", " ", "\n", "\ufeff", "x", "{"]), json_values,
              st.sampled_from(["", " ", "\t\n", "x", "}", ",1", "NaN"])).map(
        lambda t: t[0] + json.dumps(t[1]) + t[2]),
    st.sampled_from(["NaN", "[Infinity]", '{"a":-Infinity}', "[" * 5000 + "]" * 5000, "", "[DONE]"]),
    st.text(max_size=12),
)  # fmt: skip


def loading(load: Any, data: str) -> Any:
    try:
        return ("value", load(data))
    except (ValueError, RecursionError, UpstreamProtocolError) as error:
        return type(error)


@given(event_data)
@settings(max_examples=500, deadline=None)
def test_event_data_loads_as_json_loads_does(data: str) -> None:
    assert loading(lambda d: _loads(d, _SCAN), data) == loading(json.loads, data)
    chat = loading(lambda d: _loads(d, _SCAN_CHAT, parse_constant=_reject_constant), data)
    assert chat == loading(lambda d: json.loads(d, parse_constant=_reject_constant), data)
