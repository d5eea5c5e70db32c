"""The bulk chunked-body reader (relay.transport.chunked).

Two references: a plain whole-input decoder written from Tornado's rules (for the pure
state machine, fed in random pieces), and Tornado's own ``_read_chunked_body`` run over
real sockets on the same bytes (for the connection: same data, same error, same bytes
left unread after the body).
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tornado import httputil
from tornado.escape import native_str
from tornado.http1connection import HTTP1Connection, HTTP1ConnectionParameters, parse_hex_int
from tornado.iostream import IOStream, StreamClosedError, UnsatisfiableReadError

from relay.transport.chunked import MAX_SIZE_LINE, ChunkedDecoder, read_chunked_body
from relay.transport.protocol_errors import BARE_LF

HEX = re.compile(rb"[0-9a-fA-F]+")
SIZE_LINE_START = re.compile(rb"[0-9a-fA-F]*\r?")  # hex digits, then a CRLF's CR
NEXT_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


@dataclass(frozen=True)
class Outcome:
    kind: str  # "ok", "eof" (the input ran out) or the error's class name
    message: str = ""
    data: bytes = b""  # all chunk data decoded ("ok" and "eof" only)
    consumed: int = 0  # bytes of the input the body took ("ok" only)


def reference(wire: bytes, max_body_size: int = 2**62, *, early: bool = True) -> Outcome:
    """Tornado's rules, applied to the whole input at once; with ``early``, the relay's
    additions: a bare LF where a size line or a CRLF ends, and a byte no size line can
    hold, are refused where they are."""
    i, out, total = 0, b"", 0

    def crlf_at(at: int, message: str) -> Outcome | None:
        if early and wire[at : at + 1] == b"\n":
            return Outcome("HTTPInputError", BARE_LF)
        if len(wire) - at < 2:
            return Outcome("eof", data=out)
        if wire[at : at + 2] != b"\r\n":
            return Outcome("HTTPInputError", message)
        return None

    while True:
        eol = wire.find(b"\r\n", i)
        lf = wire.find(b"\n", i)
        start = SIZE_LINE_START.match(wire, i, len(wire) if lf == -1 else lf)
        assert start is not None
        if early and start.end() < (len(wire) if lf == -1 else lf):
            if start.end() + 1 - i <= MAX_SIZE_LINE:
                return Outcome("HTTPInputError", "invalid chunk size")
            return Outcome(
                "UnsatisfiableReadError", "delimiter b'\\r\\n' not found within 64 bytes"
            )
        if early and lf != -1 and lf + 1 - i <= MAX_SIZE_LINE and (lf == i or eol != lf - 1):
            return Outcome("HTTPInputError", BARE_LF)
        if (eol == -1 and len(wire) - i > MAX_SIZE_LINE) or eol + 2 - i > MAX_SIZE_LINE:
            return Outcome(
                "UnsatisfiableReadError", "delimiter b'\\r\\n' not found within 64 bytes"
            )
        if eol == -1:
            return Outcome("eof", data=out)
        line, i = wire[i:eol], eol + 2
        if HEX.fullmatch(line) is None:
            return Outcome("HTTPInputError", "invalid chunk size")
        size = int(line, 16)
        if size == 0:
            return crlf_at(i, "improperly terminated chunked request") or Outcome(
                "ok", data=out, consumed=i + 2
            )
        total += size
        if total > max_body_size:
            return Outcome("HTTPInputError", "chunked body too large")
        out += wire[i : i + size]
        if len(wire) - i < size:
            return Outcome("eof", data=out)
        i += size
        if failed := crlf_at(i, "improperly terminated chunk"):
            return failed
        i += 2


def decode(wire: bytes, reads: list[int], max_body_size: int = 2**62) -> Outcome:
    """The decoder fed as the connection feeds it: each piece at most ``wanted()``."""
    decoder = ChunkedDecoder(max_body_size)
    out: list[bytes] = []
    at, n = 0, 0
    try:
        while not decoder.done:
            if at == len(wire):
                return Outcome("eof", data=b"".join(out))
            size = min(decoder.wanted(), reads[n % len(reads)], len(wire) - at)
            n += 1
            out += decoder.feed(wire[at : at + size])
            at += size
    except (httputil.HTTPInputError, UnsatisfiableReadError) as e:
        return Outcome(type(e).__name__, str(e))
    assert decoder.wanted() == 0
    return Outcome("ok", data=b"".join(out), consumed=at)


# -- wire bytes: valid bodies in many spellings, then maybe broken ---------------------


@st.composite
def size_lines(draw: st.DrawFn, size: int) -> bytes:
    digits = format(size, "x")
    digits = "".join(draw(st.sampled_from([c, c.upper()])) for c in digits)
    line = "0" * draw(st.integers(0, 3)) + digits
    if draw(st.integers(0, 9)) == 0:  # an extension: Tornado 6.6 refuses them
        line += draw(st.sampled_from([";", ";x", ";name=value", ' ;q="a b"']))
    return line.encode()


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    payloads = draw(st.lists(st.binary(min_size=1, max_size=300), max_size=8))
    wire = b""
    for payload in payloads:
        wire += draw(size_lines(len(payload))) + b"\r\n" + payload + b"\r\n"
    return wire + draw(size_lines(0)) + b"\r\n\r\n"


@st.composite
def broken(draw: st.DrawFn, wire: bytes) -> bytes:
    crlfs = [m.start() + draw(st.integers(0, 1)) for m in re.finditer(rb"\r\n", wire)]
    at = draw(st.one_of(st.integers(0, len(wire)), st.sampled_from(crlfs)))  # often framing
    junk = draw(st.sampled_from([b"", b"\r", b"\n", b"\r\n", b"0", b"f", b"x", b"0" * 70]))
    match draw(st.sampled_from(["replace", "delete", "insert", "truncate", "pad_line"])):
        case "replace":
            return wire[:at] + junk + wire[at + 1 :]
        case "delete":
            return wire[:at] + wire[at + 1 :]
        case "insert":
            return wire[:at] + junk + wire[at:]
        case "truncate":
            return wire[:at]
        case _:  # a size line padded with zeros around the 64-byte limit
            return b"0" * draw(st.integers(55, 66)) + wire
    raise AssertionError


@st.composite
def wires(draw: st.DrawFn) -> bytes:
    wire = draw(bodies())
    if draw(st.integers(0, 2)):
        wire = draw(broken(wire))
    return wire + draw(st.sampled_from([b"", NEXT_ANSWER]))


READS = st.lists(st.integers(1, 4100), min_size=1, max_size=6)
# The body size limit: mostly none, sometimes about the body's size.
SLACK = st.one_of(st.just(2**62), st.integers(-3, 3))


@settings(max_examples=600, deadline=None)
@given(wire=wires(), reads=READS, slack=SLACK)
def test_the_decoder_agrees_with_the_reference(wire: bytes, reads: list[int], slack: int) -> None:
    limit = max(0, len(reference(wire).data) + slack) if slack < 2**62 else slack
    expected = reference(wire, limit)
    got = decode(wire, reads, limit)
    event(expected.kind + (f": {expected.message}" if expected.message else ""))
    if expected.kind in ("ok", "eof"):
        assert got == expected
    else:  # the data decoded before an error is not compared: it depends on timing
        assert (got.kind, got.message) == (expected.kind, expected.message)


@settings(max_examples=300, deadline=None)
@given(wire=bodies(), reads=READS)
def test_a_valid_body_is_read_to_its_last_byte_and_no_further(
    wire: bytes, reads: list[int]
) -> None:
    got = decode(wire + NEXT_ANSWER, reads)
    if got.kind == "ok":  # not an extension
        assert got.consumed == len(wire)


@pytest.mark.parametrize(
    ("wire", "kind", "message"),
    [
        (b"5\r\nhello\r\n0\r\n\r\n", "ok", ""),
        (b"5;ext=1\r\nhello\r\n0\r\n\r\n", "HTTPInputError", "invalid chunk size"),
        (b"0x5\r\nhello\r\n0\r\n\r\n", "HTTPInputError", "invalid chunk size"),
        (b" 5\r\nhello\r\n0\r\n\r\n", "HTTPInputError", "invalid chunk size"),
        (b"5\r\nhelloX\r\n0\r\n\r\n", "HTTPInputError", "improperly terminated chunk"),
        (b"5\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n", "HTTPInputError",
         "improperly terminated chunked request"),
        (b"0" * 62 + b"5\r\nhello\r\n0\r\n\r\n", "UnsatisfiableReadError",
         "delimiter b'\\r\\n' not found within 64 bytes"),
        (b"0" * 61 + b"5\r\nhello\r\n0\r\n\r\n", "ok", ""),
        (b"6\r\nhello!\r\n0\r\n\r\n", "HTTPInputError", "chunked body too large"),
        # A CRLF is judged once both bytes are in, a size line at its CRLF or past 64 bytes.
        (b"5\r\nhelloX", "eof", ""),
        (b"5\r\nhello\r\n0\r\nX", "eof", ""),
        (b"5;", "HTTPInputError", "invalid chunk size"),  # the relay's: at once
        (b"0" * 64, "eof", ""),
        (b"0" * 65, "UnsatisfiableReadError", "delimiter b'\\r\\n' not found within 64 bytes"),
    ],
)  # fmt: skip
def test_tornados_cases(wire: bytes, kind: str, message: str) -> None:
    got = decode(wire, [1, 7, 4096], max_body_size=5)
    assert (got.kind, got.message) == (kind, message)
    assert reference(wire, 5).kind == kind


@pytest.mark.parametrize(
    "wire",
    [
        b"3\nabc\n0\n\n",  # LF framing throughout: Tornado waits for a CRLF forever
        b"\n",
        b"3\r\nabc\n",  # after a chunk's data
        b"3\r\nabc\r\n0\r\n\n",  # after the last chunk
        b"3\r\nabc\r\n0\n",
        b"0" * 63 + b"\n",  # the 64th byte of a size line
    ],
)
def test_a_bare_lf_is_refused_where_it_arrives(wire: bytes) -> None:
    for reads in ([1], [4096]):
        assert decode(wire, reads) == Outcome("HTTPInputError", BARE_LF)
    assert reference(wire, early=False).kind != "ok"  # Tornado would never accept it


def test_a_bare_lf_past_the_size_line_limit_is_a_line_too_long() -> None:
    assert decode(b"0" * 64 + b"\n", [4096]).kind == "UnsatisfiableReadError"


@pytest.mark.parametrize(
    "wire",
    [
        b"3\rabc\r0\r\r",  # CR framing: Tornado waits for a CRLF forever
        b"3;",  # an extension
        b"3 ",
        b"x",
        b"3\r\r",
        b"0" * 63 + b";",  # the 64th byte
    ],
)
def test_a_byte_no_size_line_can_hold_is_refused_where_it_arrives(wire: bytes) -> None:
    for reads in ([1], [4096]):
        assert decode(wire, reads) == Outcome("HTTPInputError", "invalid chunk size")
    assert reference(wire, early=False).kind != "ok"


def test_such_a_byte_past_the_size_line_limit_is_a_line_too_long() -> None:
    assert decode(b"0" * 64 + b";", [4096]).kind == "UnsatisfiableReadError"


def test_feeding_more_than_a_valid_body_can_hold_is_refused() -> None:
    decoder = ChunkedDecoder(2**62)
    assert decoder.wanted() == 5
    with pytest.raises(ValueError, match="at most 5"):
        decoder.feed(b"0\r\n\r\nH")


# -- the connection against Tornado's own, over real sockets ---------------------------


class Collect(httputil.HTTPMessageDelegate):
    def __init__(self) -> None:
        self.data: list[bytes] = []

    def data_received(self, chunk: bytes) -> None:
        self.data.append(chunk)


@dataclass(frozen=True)
class Read:
    outcome: str  # "ok" or the error's class and text, with the stream's error
    data: bytes  # everything delivered ("ok" only; before an error it depends on timing)
    sizes: tuple[int, ...]  # of each data_received call
    left: bytes  # what a next reader of the stream gets


async def ours(reader: IOStream, delegate: Collect, chunk_size: int, max_body_size: int) -> None:
    """read_chunked_body as the server uses it, a too-long size line ending the stream the
    way Tornado's read_until does (so the two compare)."""

    async def deliver(data: bytes) -> None:
        delegate.data_received(data)

    try:
        await read_chunked_body(reader, max_body_size, chunk_size, deliver)
    except UnsatisfiableReadError as e:
        reader.close(exc_info=e)
        raise StreamClosedError(real_error=reader.error) from None


async def tornados(
    reader: IOStream, delegate: Collect, chunk_size: int, max_body_size: int
) -> None:
    """The reference: Tornado's own HTTP1Connection reading the same body (its private
    reader, called from this test only)."""
    params = HTTP1ConnectionParameters(chunk_size=chunk_size, max_body_size=max_body_size)
    await HTTP1Connection(reader, True, params)._read_chunked_body(delegate)


Reader = Callable[[IOStream, Collect, int, int], Awaitable[None]]


async def read_with(read: Reader, writes: list[bytes], chunk_size: int, max_body_size: int) -> Read:
    a, b = socket.socketpair()
    reader, writer = IOStream(a), IOStream(b)
    delegate = Collect()

    async def write() -> None:
        try:
            for piece in writes:
                await writer.write(piece)
                for _ in range(3):
                    await asyncio.sleep(0)
        except StreamClosedError:
            pass  # the reader gave up on a broken body
        writer.close()

    writing = asyncio.ensure_future(write())
    try:
        await asyncio.wait_for(read(reader, delegate, chunk_size, max_body_size), 5)
        outcome = "ok"
    except Exception as e:
        outcome = f"{type(e).__name__}: {e}; stream error {reader.error!r}"
    await writing
    left = await reader.read_until_close() if outcome == "ok" else b""
    reader.close()
    data = b"".join(delegate.data) if outcome == "ok" else b""
    return Read(outcome, data, tuple(len(d) for d in delegate.data), left)


@st.composite
def writes(draw: st.DrawFn) -> list[bytes]:
    wire = draw(wires())
    cuts = sorted(draw(st.lists(st.integers(0, len(wire)), max_size=6)))
    return [wire[i:j] for i, j in zip([0, *cuts], [*cuts, len(wire)], strict=True) if j > i]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    writes=writes(),
    chunk_size=st.sampled_from([7, 64, 4096, 65536]),
    slack=SLACK,
)
def test_the_connection_reads_as_tornado_does(
    writes: list[bytes], chunk_size: int, slack: int
) -> None:
    limit = max(0, len(reference(b"".join(writes)).data) + slack) if slack < 2**62 else slack

    async def both() -> tuple[Read, Read]:
        return (
            await read_with(tornados, writes, chunk_size, limit),
            await read_with(ours, writes, chunk_size, limit),
        )

    tornado, bulk = asyncio.run(both())
    event(tornado.outcome.split(";")[0] + (" (more after)" if tornado.left else ""))
    wire = b"".join(writes)
    early = reference(wire, limit)
    if early != reference(wire, limit, early=False):
        # Refused where Tornado waits for a CRLF (or refuses it later).
        assert bulk.outcome.startswith(f"{early.kind}: {early.message};"), (bulk, early)
    else:
        assert (bulk.outcome, bulk.data, bulk.left) == (
            tornado.outcome,
            tornado.data,
            tornado.left,
        )
    assert all(0 < size <= chunk_size for size in bulk.sizes)


def test_small_chunks_arriving_together_are_handed_over_together() -> None:
    wire = b"".join(b"3\r\nabc\r\n" for _ in range(300)) + b"0\r\n\r\n"
    read = asyncio.run(read_with(ours, [wire], 4096, 2**62))
    assert (read.outcome, read.data, read.left) == ("ok", b"abc" * 300, b"")
    assert read.sizes == (900,)


SPECIAL = [
    [b"5\r\nhelloX"],
    [b"5\r\nhello\r\n0\r\nX"],
    [b"0" * 64],
    [b"0" * 65],
    [b"0" * 30, b"0" * 40],
    [b"0" * 62, b"\r\n\r\n"],
    [b"0" * 61, b"\r", b"\n\r\n" + NEXT_ANSWER],
    [b"5\r\nhel", b"lo\r", b"\n0\r\n\r", b"\n" + NEXT_ANSWER],
    [b"5\r\nhello\r\n0\r\n\r\n" + NEXT_ANSWER],
]


@pytest.mark.parametrize("writes", SPECIAL)
def test_edge_cases_read_as_tornado_does(writes: list[bytes]) -> None:
    async def both() -> tuple[Read, Read]:
        return (
            await read_with(tornados, writes, 4096, 2**62),
            await read_with(ours, writes, 4096, 2**62),
        )

    tornado, bulk = asyncio.run(both())
    assert (bulk.outcome, bulk.data, bulk.left) == (tornado.outcome, tornado.data, tornado.left)


def test_data_is_handed_over_before_waiting_for_more() -> None:
    """The first chunk reaches the delegate while the rest of the body is still to come:
    the writer sends the rest only once it did (else this would wait forever)."""

    async def main() -> list[bytes]:
        a, b = socket.socketpair()
        reader, writer = IOStream(a), IOStream(b)
        got = asyncio.Event()

        class Signal(Collect):
            def data_received(self, chunk: bytes) -> None:
                super().data_received(chunk)
                got.set()

        delegate = Signal()
        reading = asyncio.ensure_future(ours(reader, delegate, 4096, 2**62))
        await writer.write(b"5\r\nfirst\r\n")
        await asyncio.wait_for(got.wait(), 5)
        await writer.write(b"4\r\nlast\r\n0\r\n\r\n")
        await asyncio.wait_for(reading, 5)
        reader.close()
        writer.close()
        return delegate.data

    assert asyncio.run(main()) == [b"first", b"last"]


SIZE_LINES = [bytes([b]) for b in range(256)] + [
    b"", b"1a", b"1A", b"01", b"0x1", b"+1", b"-1", b"1_0", b" 1", b"1 ", b"1\t", b"1;x",
    "\u0661".encode(), "\uff41".encode(), b"\xff\xfe", b"f" * 16, b"0" * 60 + b"1",
]  # fmt: skip


@pytest.mark.parametrize("line", SIZE_LINES)
def test_size_lines_are_accepted_as_tornado_accepts_them(line: bytes) -> None:
    try:
        expected: object = parse_hex_int(native_str(line))
    except ValueError:
        # A LF in it is a bare LF, refused where it is (Tornado waits for the CRLF after).
        expected = BARE_LF if b"\n" in line else "invalid chunk size"
    decoder = ChunkedDecoder(2**70)
    wire = line + b"\r\n"
    try:
        while wire:
            size = min(decoder.wanted(), len(wire))
            decoder.feed(wire[:size])
            wire = wire[size:]
        got: object = decoder.wanted() - 2 - 5 if decoder.wanted() > 2 else 0
    except httputil.HTTPInputError as e:
        got = str(e)
    assert got == expected
