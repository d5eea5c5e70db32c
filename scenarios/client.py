"""A raw HTTP/1.1 client for the relay, over a plain socket.

Client libraries hide exactly what the scenarios need to control: when bytes are read
(a slow or stalled reader), how the connection ends (a mid-stream disconnect, with RST or
FIN), and what arrived on the wire (each SSE frame, keepalive comments, a missing
``[DONE]``). So this client speaks HTTP/1.1 itself: one request per connection,
``Content-Length`` or chunked uploads, and an incremental decoder for chunked or
length-delimited answers that splits SSE frames as they arrive.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from scenarios.answer import ChatAnswer, parse_sse_data


class ClientProtocolError(RuntimeError):
    """The relay's answer is not valid HTTP/1.1 framing."""


@dataclass
class _Body:
    """Incremental HTTP body decoder (chunked, Content-Length, or until close)."""

    mode: str  # "chunked" | "length" | "close"
    remaining: int = 0  # length mode: body bytes left; chunked: data bytes left in chunk
    finished: bool = False
    _buffer: bytearray = field(default_factory=bytearray)
    _crlf_left: int = 0  # chunked: bytes of the CRLF after a chunk still to drop

    def feed(self, data: bytes) -> bytes:
        """Raw socket bytes in, body bytes out (as far as they are complete)."""
        if self.mode == "close":
            return data
        if self.mode == "length":
            take = data[: self.remaining]
            self.remaining -= len(take)
            self.finished = self.remaining == 0
            return take
        self._buffer += data
        out = bytearray()
        while not self.finished and self._buffer:
            if self._crlf_left:
                drop = min(self._crlf_left, len(self._buffer))
                del self._buffer[:drop]
                self._crlf_left -= drop
            elif self.remaining:
                piece = self._buffer[: self.remaining]
                del self._buffer[: len(piece)]
                self.remaining -= len(piece)
                out += piece
                if self.remaining == 0:
                    self._crlf_left = 2
            else:
                end = self._buffer.find(b"\r\n")
                if end < 0:
                    break
                size_text = bytes(self._buffer[:end]).split(b";", 1)[0].strip()
                try:
                    size = int(size_text, 16)
                except ValueError:
                    raise ClientProtocolError(f"bad chunk size {size_text!r}") from None
                del self._buffer[: end + 2]
                if size == 0:
                    self.finished = True  # trailers, if any, are ignored
                self.remaining = size
        return bytes(out)


class RelayConnection:
    """One request/answer exchange on its own socket; the caller decides how to read."""

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        timeout: float = 15.0,
        rcvbuf: int | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            # Small receive buffer before connect: the window the relay can fill is tiny,
            # so a stalled reader pushes back on the relay within a few KB.
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect((self.host, self.port))
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.raw_body = bytearray()
        self.answer = ChatAnswer()
        self.closed_by_us = False
        self.eof = False
        self._pending = bytearray()  # received, not yet parsed as headers
        self._body: _Body | None = None
        self._sse = bytearray()

    # --- sending ---------------------------------------------------------------------

    def send_request(
        self,
        method: str,
        path: str,
        body: bytes | Iterable[bytes] = b"",
        *,
        headers: dict[str, str] | None = None,
        chunked: bool = False,
        content_length: int | None = None,
    ) -> None:
        """Send a request; stop sending early if the relay answers first (e.g. a 413)."""
        lines = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        if self.token is not None:
            lines.append(f"Authorization: Bearer {self.token}")
        all_headers = {"Content-Type": "application/json", "Connection": "close"}
        all_headers.update(headers or {})
        pieces: Iterable[bytes] = [body] if isinstance(body, bytes) else body
        if chunked:
            all_headers["Transfer-Encoding"] = "chunked"
        else:
            if content_length is None:
                pieces = [b"".join(pieces)]
                content_length = len(pieces[0])
            all_headers["Content-Length"] = str(content_length)
        lines += [f"{key}: {value}" for key, value in all_headers.items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        try:
            for piece in pieces:
                if self._answer_started():
                    return
                if chunked:
                    if piece:
                        self.sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
                else:
                    self.sock.sendall(piece)
            if chunked and not self._answer_started():
                self.sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            return  # the relay refused the rest of the body; its answer is what matters

    def _answer_started(self) -> bool:
        readable, _, _ = select.select([self.sock], [], [], 0)
        return bool(readable)

    # --- receiving -------------------------------------------------------------------

    def read_some(self, max_bytes: int = 65536) -> bool:
        """One recv; parse what arrived. False at EOF."""
        try:
            data = self.sock.recv(max_bytes)
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
            self._finish_sse()
            return False
        self._ingest(data)
        return True

    def _ingest(self, data: bytes) -> None:
        if self.status is None:
            self._pending += data
            head_end = self._pending.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = bytes(self._pending[:head_end]).decode("latin-1")
            data = bytes(self._pending[head_end + 4 :])
            self._pending.clear()
            self._parse_head(head)
        assert self._body is not None
        body = self._body.feed(data)
        self.raw_body += body
        if self.is_sse:
            self._sse += body
            self._split_frames()

    def _parse_head(self, head: str) -> None:
        status_line, *header_lines = head.split("\r\n")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise ClientProtocolError(f"bad status line {status_line!r}")
        self.status = int(parts[1])
        for line in header_lines:
            key, _, value = line.partition(":")
            self.headers[key.strip().lower()] = value.strip()
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            self._body = _Body("chunked")
        elif "content-length" in self.headers:
            length = int(self.headers["content-length"])
            self._body = _Body("length", remaining=length, finished=length == 0)
        else:
            self._body = _Body("close")
        self.answer.status = self.status
        self.answer.request_id = self.headers.get("x-request-id")

    @property
    def is_sse(self) -> bool:
        return self.headers.get("content-type", "").startswith("text/event-stream")

    @property
    def body_finished(self) -> bool:
        return self._body is not None and self._body.finished

    def _split_frames(self) -> None:
        while True:
            end = self._sse.find(b"\n\n")
            if end < 0:
                return
            frame = bytes(self._sse[:end])
            del self._sse[: end + 2]
            self._on_frame(frame)

    def _on_frame(self, frame: bytes) -> None:
        data_lines = []
        for line in frame.decode("utf-8", "replace").split("\n"):
            if line.startswith(":"):
                self.answer.comments += 1
            elif line.startswith("data:"):
                data_lines.append(line[5:].removeprefix(" "))
        if data_lines:
            parse_sse_data(self.answer, "\n".join(data_lines))

    def _finish_sse(self) -> None:
        if self.is_sse and self._sse.strip():
            self.answer.trailing_bytes = len(self._sse)

    # --- reading strategies ----------------------------------------------------------

    def read_head(self) -> int | None:
        """Read up to the end of the headers; None if the connection ended first (a relay
        killed before it answered: the answer's outcome is then ``cut``)."""
        deadline = time.monotonic() + self.timeout
        while self.status is None:
            if time.monotonic() > deadline:
                raise TimeoutError("no status line from the relay in time")
            if not self.read_some():
                return None
        return self.status

    def read_frames(self, count: int, timeout: float | None = None) -> int:
        """Read until ``count`` data frames arrived (or EOF); return frames seen."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while len(self.answer.frames) < count and not self.eof and not self.body_finished:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(self.answer.frames)} of {count} frames arrived")
            self.read_some()
        return len(self.answer.frames)

    def read_all(self, timeout: float | None = None) -> ChatAnswer:
        deadline = time.monotonic() + (timeout or self.timeout)
        while not self.eof and not self.body_finished:
            if time.monotonic() > deadline:
                raise TimeoutError("the relay's answer did not end in time")
            self.read_some()
        return self.finish()

    def set_rcvbuf(self, size: int) -> None:
        """Resize the receive buffer mid-stream (Linux re-opens the window at once)."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)

    def read_slowly(self, bytes_per_read: int, pause_s: float, timeout: float) -> ChatAnswer:
        """A slow reader: small reads with pauses, so the relay must wait on us."""
        deadline = time.monotonic() + timeout
        while not self.eof and not self.body_finished:
            if time.monotonic() > deadline:
                raise TimeoutError("slow read did not finish in time")
            self.read_some(bytes_per_read)
            time.sleep(pause_s)  # the point of a slow reader: not waiting for an event
        return self.finish()

    def finish(self) -> ChatAnswer:
        if not self.is_sse and self.status is not None:
            self.answer.set_json_body(bytes(self.raw_body))
        self.answer.eof = self.eof or self.body_finished
        self.close()
        return self.answer

    def disconnect(self, *, reset: bool = True) -> ChatAnswer:
        """Leave mid-answer: RST (SO_LINGER 0) like a killed client, or a polite FIN."""
        if reset:
            with contextlib.suppress(OSError):
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.closed_by_us = True
        self.answer.disconnected = True
        self.close()
        return self.answer

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def chat(
    base_url: str,
    token: str | None,
    body: dict[str, Any],
    *,
    timeout: float = 15.0,
) -> ChatAnswer:
    """One complete chat request (JSON or streamed, as ``body['stream']`` says)."""
    conn = RelayConnection(base_url, token, timeout=timeout)
    try:
        conn.send_request("POST", "/chat/completions", json.dumps(body).encode("utf-8"))
        conn.read_head()
        return conn.read_all()
    finally:
        conn.close()
