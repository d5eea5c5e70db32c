"""Reading a chunked body in bulk, exactly as strictly as Tornado, never past its end.

Tornado's HTTP/1 connection makes three IOStream reads per chunk (the size line, the data,
its CRLF); an upstream writing one chunk per SSE event pays them per event.
:func:`read_chunked_body` instead reads whatever has arrived and decodes the framing from
it with :class:`ChunkedDecoder`, a pure state machine. The relay's server connection
(:mod:`relay.transport.http_server`) reads request bodies with it, and the upstream
client (:mod:`relay.transport.upstream_client`) feeds the decoder its own reads.

Never past the end: the body is followed, on a kept-alive connection, by the next answer,
which must stay unread in the stream. :meth:`ChunkedDecoder.wanted` is the least number of
bytes any valid body could still hold from where the decoder stands (for instance, after a
chunk's data: its CRLF and a last chunk ``0\\r\\n\\r\\n``), and a read never asks for more.
So a valid body is read up to its last byte and not one byte further; an invalid one ends
with an error and the connection is closed anyway.

Exactly as strict, with the same errors, checked at the same points: a size line ends at
its first CRLF within 64 bytes (else Tornado's ``UnsatisfiableReadError``, and the stream
is closed) and holds ASCII hex digits only, which is what Tornado's ``parse_hex_int``
accepts (so chunk extensions are refused as an invalid chunk size, as Tornado 6.6 does);
the body's total is checked against ``max_body_size`` at each size line; a chunk's data
and the last chunk are followed by exactly ``\\r\\n``, compared once both bytes are in
(no trailers). Decoded data is coalesced up to ``chunk_size`` and handed over before any
read that has to wait for the network, as Tornado does; the loop yields every
:data:`YIELD_THRESHOLD` of work, a chunk counting :data:`CHUNK_YIELD_COST` (Tornado's values).

Two rules are stricter than Tornado's, in time only. A bare LF (a ``\n`` that does not
end a CRLF) where a size line ends or where a chunk's CRLF is due is refused as soon as it
arrives (:data:`BARE_LF`); so is a byte no size line can hold (anything but hex digits and
its CRLF: a bare CR, an extension), as an invalid chunk size. Tornado waits for the CRLF
first, which a client framing its lines with LF or CR alone never sends, so the request
would hang until the idle timeout; every body refused this way Tornado would have refused
too, or never finished.
"""

from __future__ import annotations

import asyncio
import re
from asyncio import Future
from collections.abc import Awaitable, Callable
from typing import Final

from tornado import httputil, iostream

from relay.transport.protocol_errors import BARE_LF

# Tornado reads a size line with read_until(b"\r\n", max_bytes=64).
MAX_SIZE_LINE: Final = 64
_CRLF: Final = b"\r\n"
# The shortest end of a body from a chunk boundary: the last chunk and its CRLF.
_LAST_CHUNK: Final = len(b"0\r\n\r\n")
# As Tornado: a body arriving faster than it is processed would hold the loop; yield after
# this much work, a chunk counting CHUNK_YIELD_COST bytes (its overhead dominates when small).
YIELD_THRESHOLD: Final = 256 * 1024
CHUNK_YIELD_COST: Final = 1024

_HEXDIGITS: Final = b"0123456789abcdefABCDEF"
# What a size line can begin with: hex digits, then the CR of its CRLF.
_SIZE_LINE_START: Final = re.compile(rb"[0-9a-fA-F]*\r?")
_CR: Final = 13
_LF: Final = 10

_LINE, _DATA, _DATA_END, _LAST_END, _DONE = range(5)


def _line_too_long() -> iostream.UnsatisfiableReadError:
    return iostream.UnsatisfiableReadError(
        f"delimiter {_CRLF!r} not found within {MAX_SIZE_LINE} bytes"
    )


class ChunkedDecoder:
    """Decodes a chunked body fed in pieces of at most :meth:`wanted` bytes each.

    :meth:`feed` returns the chunk data the piece completed or continued and counts the
    size lines in :attr:`chunks`; it raises ``HTTPInputError`` (a malformed or too large
    body) or ``UnsatisfiableReadError`` (a size line over 64 bytes) exactly where Tornado
    does, or earlier where Tornado would wait (module docstring).
    :attr:`done` once the last chunk's CRLF is in.
    """

    __slots__ = ("_crlf", "_line", "_max_body_size", "_remaining", "_state", "_total", "chunks")

    def __init__(self, max_body_size: int) -> None:
        self._max_body_size = max_body_size
        self._state = _LINE
        self._line = b""  # a size line without its CRLF yet
        self._remaining = 0  # data bytes still due in the current chunk
        self._crlf = b""  # the bytes of an expected CRLF received so far
        self._total = 0
        self.chunks = 0  # size lines parsed (the last chunk's included)

    @property
    def done(self) -> bool:
        return self._state == _DONE

    def wanted(self) -> int:
        """The least number of bytes any valid body still holds from here (0 when done)."""
        state = self._state
        if state == _DATA:
            return self._remaining + len(_CRLF) + _LAST_CHUNK
        if state == _LINE:
            # Empty: a digit, CRLF, then at least the last chunk's CRLF. Started: at least
            # the line's "\n", then that CRLF.
            return 3 if self._line else _LAST_CHUNK
        if state == _DATA_END:
            return len(_CRLF) - len(self._crlf) + _LAST_CHUNK
        if state == _LAST_END:
            return len(_CRLF) - len(self._crlf)
        return 0

    def feed(self, data: bytes) -> list[bytes]:
        """The chunk data in ``data`` (at most :meth:`wanted` bytes), in order."""
        end = len(data)
        if end > self.wanted():
            raise ValueError(f"fed {end} bytes where at most {self.wanted()} may follow")
        out: list[bytes] = []
        i = 0
        state = self._state
        while i < end:
            if state == _DATA:
                take = min(self._remaining, end - i)
                out.append(data if take == end else data[i : i + take])
                i += take
                self._remaining -= take
                if not self._remaining:
                    state = _DATA_END
            elif state == _LINE:
                if self._line:
                    data = self._line + data[i:]
                    self._line = b""
                    i, end = 0, len(data)
                lf = data.find(b"\n", i)
                stop = end if lf == -1 else lf
                bad = _SIZE_LINE_START.match(data, i, stop).end()  # type: ignore[union-attr]
                if bad < stop:  # a byte no size line can hold: refused where it is
                    if bad + 1 - i > MAX_SIZE_LINE:
                        raise _line_too_long()
                    raise httputil.HTTPInputError("invalid chunk size")
                if lf == -1:
                    if end - i > MAX_SIZE_LINE:
                        raise _line_too_long()
                    self._line = data[i:]
                    break
                if lf + 1 - i > MAX_SIZE_LINE:
                    raise _line_too_long()
                if lf == i or data[lf - 1] != _CR:
                    raise httputil.HTTPInputError(BARE_LF)
                eol = lf - 1
                state = self._size_line(data[i:eol])
                i = eol + 2
            else:  # _DATA_END or _LAST_END: exactly CRLF, judged once both bytes are in
                if not self._crlf and data[i] == _LF:
                    raise httputil.HTTPInputError(BARE_LF)
                crlf = self._crlf + data[i : i + 2 - len(self._crlf)]
                i += len(crlf) - len(self._crlf)
                if len(crlf) < 2:
                    self._crlf = crlf
                    break
                self._crlf = b""
                if crlf != b"\r\n":
                    if state == _DATA_END:
                        raise httputil.HTTPInputError("improperly terminated chunk")
                    raise httputil.HTTPInputError("improperly terminated chunked request")
                state = _LINE if state == _DATA_END else _DONE
        self._state = state
        return out

    def _size_line(self, line: bytes) -> int:
        """The state after a size line (without its CRLF)."""
        self.chunks += 1
        # What Tornado's parse_hex_int(native_str(line)) accepts: ASCII hex digits only.
        if not line or line.translate(None, _HEXDIGITS):
            raise httputil.HTTPInputError("invalid chunk size")
        size = int(line, 16)
        if size == 0:
            return _LAST_END
        self._total += size
        if self._total > self._max_body_size:
            raise httputil.HTTPInputError("chunked body too large")
        self._remaining = size
        return _DATA


async def read_chunked_body(
    stream: iostream.IOStream,
    max_body_size: int,
    chunk_size: int,
    deliver: Callable[[bytes], Awaitable[None]],
) -> None:
    """Read a chunked body from ``stream`` up to its last byte, handing its data to
    ``deliver`` in pieces of at most ``chunk_size``. Raises what :meth:`ChunkedDecoder.feed`
    raises (``UnsatisfiableReadError``: a size line over 64 bytes, for the caller to
    answer) and ``StreamClosedError``."""
    decoder = ChunkedDecoder(max_body_size)
    pending: list[bytes] = []  # decoded data not handed over yet
    pending_bytes = 0
    work = 0  # see YIELD_THRESHOLD
    while not decoder.done:
        future = stream.read_bytes(min(decoder.wanted(), chunk_size), partial=True)
        if pending and not (isinstance(future, Future) and future.done()):
            # About to wait for the network: hand over what is decoded first.
            data = b"".join(pending)
            pending.clear()
            pending_bytes = 0
            await deliver(data)
        received = await future
        chunks = decoder.chunks
        for piece in decoder.feed(received):
            pending.append(piece)
            pending_bytes += len(piece)
        while pending_bytes >= chunk_size:
            data = b"".join(pending)
            pending.clear()
            rest = data[chunk_size:]
            if rest:
                pending.append(rest)
            pending_bytes = len(rest)
            await deliver(data[:chunk_size])
        work += len(received) + (decoder.chunks - chunks) * CHUNK_YIELD_COST
        if work >= YIELD_THRESHOLD:
            work = 0
            await asyncio.sleep(0)
    if pending:
        await deliver(b"".join(pending))
