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
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from relay.errors import UpstreamProtocolError

_LINE_END = re.compile(rb"[\r\n]")
_BOM = b"\xef\xbb\xbf"
_CR = 0x0D
_LF = 0x0A
DONE_DATA = "[DONE]"


@dataclass(frozen=True)
class SSEEvent:
    event: str | None  # the ``event:`` field, None when absent
    data: str


class SSEParser:
    def __init__(self, *, max_event_bytes: int) -> None:
        self._max_event_bytes = max_event_bytes
        self._buf = bytearray()
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
        self._buf += chunk
        if not self._bom_checked:
            if len(self._buf) < len(_BOM) and _BOM.startswith(self._buf):
                return []  # maybe a BOM, maybe not: wait for more bytes
            self._skip_bom()
        events = []
        while (line := self._next_line()) is not None:
            event = self._line(line)
            if event is not None:
                events.append(event)
            self._check_size(0)
        del self._buf[: self._pos]
        self._scan -= self._pos
        self._pos = 0
        self._check_size(len(self._buf))
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: the final event, if one was left without its blank line."""
        self._closed = True
        if not self._bom_checked:
            self._skip_bom()
        if self._pos < len(self._buf):
            self._line(bytes(self._buf[self._pos :]))  # the last line, without its line end
        self._buf.clear()
        self._pos = self._scan = 0
        if not self._data:
            return []
        data = "\n".join(self._data)
        if data != DONE_DATA:
            try:
                json.loads(data)
            except ValueError:
                raise UpstreamProtocolError(
                    "upstream event stream ended in the middle of an event"
                ) from None
        return [self._dispatch_event()]

    # --- internals ---------------------------------------------------------------------

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


def decode_event(event: SSEEvent) -> tuple[str, dict[str, Any]]:
    """``(type, payload)`` of a Responses stream event.

    The type comes from the payload's ``type`` (the ``event:`` line, when present, must
    agree) and falls back to the ``event:`` line. ``data: [DONE]``, which some upstreams
    send after the terminal event, gives ``("[DONE]", {})`` so callers can ignore it.
    """
    if event.data == DONE_DATA:
        return DONE_DATA, {}
    try:
        payload = json.loads(event.data)
    except ValueError:
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


def _reject_constant(name: str) -> Any:
    raise UpstreamProtocolError(f"upstream SSE event data holds {name}, which is not JSON")


def decode_chat_event(event: SSEEvent) -> dict[str, Any] | None:
    """The payload of a Chat Completions stream event: a ``chat.completion.chunk`` or an
    ``{"error": ...}`` envelope; ``None`` for the terminal ``data: [DONE]``. Chat streams
    carry no ``event:`` type, so the line, when present, is not checked."""
    if event.data == DONE_DATA:
        return None
    try:
        payload = json.loads(event.data, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise UpstreamProtocolError("upstream SSE event data is not valid JSON") from None
    if not isinstance(payload, dict):
        raise UpstreamProtocolError("upstream SSE event data is not a JSON object")
    return payload
