"""Incremental Server-Sent Events parser: bytes in, events out, no I/O.

Follows the WHATWG event-stream rules the relay needs: ``event:``/``data:`` fields (``id:``
and ``retry:`` are read and ignored: the relay never reconnects), ``:`` comments, LF, CR
and CRLF line ends, one optional space after the colon, several ``data:`` lines joined with
``"\\n"``, a leading BOM skipped. Lines are split on bytes (CR and LF never occur inside a
UTF-8 sequence) and decoded strictly, so any chunking of the same bytes gives the same
events.

Two deliberate departures from a browser's EventSource:

- At end of stream, an event whose blank line never came is still delivered when its data
  is complete JSON (or ``[DONE]``): some deployments end the stream right after the
  terminal event's ``data:`` line. Anything else left over is a protocol error.
- An event larger than ``max_event_bytes`` (field lines without their line ends, plus the
  unfinished line) is a protocol error rather than unbounded buffering.

Speed: a stream costs the relay its parse once per event, so whole events are taken in one
step where that cannot change the outcome: at an event boundary, an LF-only stretch up to a
blank line (``\n\n``) is decoded once and split into its lines, with no per-line search or
copy. Anything else (CR line ends, an event split across reads, a blank line not yet
arrived, invalid UTF-8, an event near the size limit) goes line by line as before, so
errors are raised by the same line and in the same :meth:`SSEParser.feed` call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, NamedTuple

from relay.errors import UpstreamProtocolError

_LINE_END = re.compile(rb"[\r\n]")
_BOM = b"\xef\xbb\xbf"
_CR = 0x0D
_LF = 0x0A
DONE_DATA = "[DONE]"


class SSEEvent(NamedTuple):  # made once per event: a tuple takes 2/3 of a dataclass's time
    event: str | None  # the ``event:`` field, None when absent
    data: str


class SSEParser:
    def __init__(self, *, max_event_bytes: int) -> None:
        self._max_event_bytes = max_event_bytes
        # The unparsed bytes: between feeds, the unfinished line (a bytearray, grown in
        # place) or b"" when there is none.
        self._buf: bytes | bytearray = b""
        self._pos = 0  # start of the unfinished line in _buf
        self._scan = 0  # _buf[_pos:_scan] is known to hold no line end
        self._skip_lf = False  # the last line ended in CR at a chunk edge: drop a next LF
        self._bom_checked = False
        self._event_type: str | None = None
        self._data: list[str] = []
        self._event_bytes = 0  # bytes of the current event's finished lines
        self._closed = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events completed by ``chunk`` (possibly none)."""
        if self._closed:
            raise RuntimeError("SSEParser.feed() called after close()")
        if self._buf:
            self._buf += chunk  # a bytearray holding the unfinished line
        else:
            self._buf = bytes(chunk)  # nothing pending: parse the chunk where it is (no copy)
        if not self._bom_checked:
            if len(self._buf) < len(_BOM) and _BOM.startswith(self._buf):
                self._buf = bytearray(self._buf)
                return []  # maybe a BOM, maybe not: wait for more bytes
            self._skip_bom()
        events: list[SSEEvent] = []
        while True:
            if not self._skip_lf and not self._event_bytes:  # at an event boundary
                self._whole_events(events)
                if self._pos == len(self._buf):
                    break  # all parsed (_scan is there too)
            line = self._next_line()
            if line is None:
                break
            event = self._line(line)
            if event is not None:
                events.append(event)
            self._check_size(0)
        self._keep_unfinished_line()
        self._check_size(len(self._buf))
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: the final event, if one was left without its blank line."""
        self._closed = True
        if not self._bom_checked:
            self._skip_bom()
        if self._pos < len(self._buf):
            self._line(bytes(self._buf[self._pos :]))  # the last line, without its line end
        self._buf = b""
        self._pos = self._scan = 0
        if not self._data:
            return []
        data = "\n".join(self._data)
        if data != DONE_DATA:
            try:
                json.loads(data)
            except (ValueError, RecursionError):  # deep nesting is as malformed as a cut
                raise UpstreamProtocolError(
                    "upstream event stream ended in the middle of an event"
                ) from None
        return [self._dispatch_event()]

    # --- internals ---------------------------------------------------------------------

    def _whole_events(self, events: list[SSEEvent]) -> None:
        """At an event boundary: take every complete LF-only event from ``_pos`` in one step
        each, appending those with data to ``events``; stop before anything that needs the
        line-by-line path (see the module docstring)."""
        buf = self._buf
        pos = start = self._pos
        scan = self._scan  # buf[pos:scan]: an unfinished first line seen in earlier reads
        cr = buf.find(b"\r", scan)
        limit = len(buf) if cr < 0 else cr  # LF-only up to here
        while pos < limit:
            if buf[pos] == _LF:
                pos += 1  # a blank line between events: nothing to dispatch
                continue
            # The event's first line ends at ``first``; a blank line right after it, or
            # after its second line (``second``), ends the usual one- or two-line event.
            first = buf.find(b"\n", max(pos, scan), limit)
            if first < 0:
                break
            second = -1
            if first + 1 < limit and buf[first + 1] == _LF:
                end = first
            else:
                second = buf.find(b"\n", first + 1, limit)
                if second < 0:
                    break
                if second + 1 < limit and buf[second + 1] == _LF:
                    end = second
                else:
                    end = buf.find(b"\n\n", second + 1, limit)
                    if end < 0:
                        break  # no blank line yet: line by line keeps the event's start
            if end - pos > self._max_event_bytes:
                break  # maybe too large: line by line decides, and raises at the same line
            try:
                event = self._whole_event(buf, pos, first, second, end)
            except UnicodeDecodeError:
                break  # line by line raises it, at the same line
            pos = end + 2
            if event is not None:
                events.append(event)
        if pos != start:
            self._pos = self._scan = pos

    @staticmethod
    def _whole_event(
        buf: bytes | bytearray, pos: int, first: int, second: int, end: int
    ) -> SSEEvent | None:
        """The event held by the lines ``buf[pos:end]`` (no blank line among them), the
        first ending at ``first`` and, when there are exactly two, the second at ``second``
        (else -1); None when it has no data. Raises UnicodeDecodeError before any effect."""
        if first == end:
            if buf.startswith(b"data: ", pos):  # a Chat stream's event
                return SSEEvent(None, buf[pos + 6 : end].decode("utf-8"))
        elif (
            second == end
            and buf.startswith(b"event: ", pos)
            and buf.startswith(b"data: ", first + 1)
        ):  # a Responses stream's event
            name = buf[pos + 7 : first].decode("utf-8")
            return SSEEvent(name or None, buf[first + 7 : end].decode("utf-8"))
        # Any other event: the same field rules as _line, on its lines decoded at once.
        event_type: str | None = None
        data: list[str] = []
        for line in buf[pos:end].decode("utf-8").split("\n"):
            if line.startswith(":"):
                continue  # comment (keepalive)
            name, colon, value = line.partition(":")
            if colon and value.startswith(" "):
                value = value[1:]
            if name == "event":
                event_type = value or None
            elif name == "data":
                data.append(value)
        return SSEEvent(event_type, "\n".join(data)) if data else None

    def _keep_unfinished_line(self) -> None:
        """Drop the parsed bytes; keep the unfinished line in a bytearray that can grow."""
        buf = self._buf
        pos = self._pos
        if pos >= len(buf):
            self._buf = b""
        elif isinstance(buf, bytearray):
            del buf[:pos]
        else:
            self._buf = bytearray(memoryview(buf)[pos:])
        self._scan -= pos
        self._pos = 0

    def _skip_bom(self) -> None:
        self._bom_checked = True
        if self._buf.startswith(_BOM):
            self._pos = self._scan = len(_BOM)

    def _next_line(self) -> bytes | None:
        """The next finished line (without its line end), or None when none is complete."""
        if self._skip_lf and self._pos < len(self._buf):
            self._skip_lf = False
            if self._buf[self._pos] == _LF:
                self._pos += 1
                self._scan = max(self._scan, self._pos)
        match = _LINE_END.search(self._buf, self._scan)
        if match is None:
            self._scan = len(self._buf)
            return None
        end = match.start()
        line = bytes(self._buf[self._pos : end])
        after = end + 1
        if self._buf[end] == _CR:
            if after == len(self._buf):
                self._skip_lf = True  # CRLF may be split across chunks
            elif self._buf[after] == _LF:
                after += 1
        self._pos = self._scan = after
        self._event_bytes += len(line)
        return line

    def _line(self, raw: bytes) -> SSEEvent | None:
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise UpstreamProtocolError("upstream event stream is not valid UTF-8") from None
        if not line:  # a blank line ends the event; one without data is dropped
            if self._data:
                return self._dispatch_event()
            self._reset()
            return None
        if line.startswith(":"):
            return None  # comment (keepalive)
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event_type = value or None
        elif name == "data":
            self._data.append(value)
        return None  # id, retry and unknown fields: nothing for the relay to do

    def _dispatch_event(self) -> SSEEvent:
        event = SSEEvent(self._event_type, "\n".join(self._data))
        self._reset()
        return event

    def _reset(self) -> None:
        self._event_type = None
        self._data = []
        self._event_bytes = 0

    def _check_size(self, pending: int) -> None:
        if self._event_bytes + pending > self._max_event_bytes:
            raise UpstreamProtocolError(
                f"upstream sent an SSE event larger than {self._max_event_bytes} bytes; "
                "raise RELAY_MAX_SSE_EVENT_BYTES if such events are expected"
            )


_Scanner = Callable[[str, int], tuple[Any, int]]
# The scanners json.loads runs (for Chat, with its parse_constant), built once.
# (JSONDecoder makes its scan_once in __init__; the stubs leave it out.)
_SCAN: _Scanner = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def _reject_constant(name: str) -> Any:
    raise UpstreamProtocolError(f"upstream SSE event data holds {name}, which is not JSON")


_SCAN_CHAT: _Scanner = json.JSONDecoder(parse_constant=_reject_constant).scan_once  # type: ignore[attr-defined]


def _loads(data: str, scan: _Scanner, **options: Any) -> Any:
    """``json.loads(data, **options)`` where ``scan`` is its scanner: when ``data`` is one
    JSON value with nothing around it (an event's data always is), the scanner alone gives
    it; anything else (whitespace, a BOM, an error) goes to json.loads itself."""
    try:
        value, end = scan(data, 0)
    except (StopIteration, ValueError, RecursionError):
        return json.loads(data, **options)  # raises as it always did
    if end != len(data):
        return json.loads(data, **options)
    return value


def decode_event(event: SSEEvent) -> tuple[str, dict[str, Any]]:
    """``(type, payload)`` of a Responses stream event.

    The type comes from the payload's ``type`` (the ``event:`` line, when present, must
    agree) and falls back to the ``event:`` line. ``data: [DONE]``, which some upstreams
    send after the terminal event, gives ``("[DONE]", {})`` so callers can ignore it.

    The payload is any JSON object, passed on untouched: the pipeline that receives it
    decodes it once (:func:`relay.core.responses_events.decode`, where an unknown or
    malformed event is told apart) for the converter, the capture and the passthrough,
    which still forwards the payload as it came.
    """
    if event.data == DONE_DATA:
        return DONE_DATA, {}
    try:
        payload = _loads(event.data, _SCAN)
    except (ValueError, RecursionError):
        raise UpstreamProtocolError("upstream SSE event data is not valid JSON") from None
    if not isinstance(payload, dict):
        raise UpstreamProtocolError("upstream SSE event data is not a JSON object")
    kind = payload.get("type", event.event)
    if not isinstance(kind, str) or not kind:
        raise UpstreamProtocolError("upstream SSE event has no type")
    if event.event is not None and event.event != kind:
        raise UpstreamProtocolError(
            f"upstream SSE event line says {event.event[:64]!r} but its data says {kind[:64]!r}"
        )
    return kind, payload


def decode_chat_event(event: SSEEvent) -> dict[str, Any] | None:
    """The payload of a Chat Completions stream event: a ``chat.completion.chunk`` or an
    ``{"error": ...}`` envelope; ``None`` for the terminal ``data: [DONE]``. Chat streams
    carry no ``event:`` type, so the line, when present, is not checked."""
    if event.data == DONE_DATA:
        return None
    try:
        payload = _loads(event.data, _SCAN_CHAT, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise UpstreamProtocolError("upstream SSE event data is not valid JSON") from None
    if not isinstance(payload, dict):
        raise UpstreamProtocolError("upstream SSE event data is not a JSON object")
    return payload
