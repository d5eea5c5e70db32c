"""relay.transport.sse: incremental SSE parsing and event decoding."""

from __future__ import annotations

from typing import Any

import pytest

from relay.errors import UpstreamProtocolError
from relay.transport.sse import SSEEvent, SSEParser, decode_event

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
    [b'data: {"type":"response.comp', b'data: {"type":"x"\n', b"data: not json\n", b"data:"],
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
    ],
)
def test_decode_event_errors(event: SSEEvent, message: str) -> None:
    with pytest.raises(UpstreamProtocolError, match=message):
        decode_event(event)
