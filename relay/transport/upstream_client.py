"""The relay's own HTTP/1.1 client for the upstream, on Tornado's public IOStream and
TCPClient: what a streamed model call needs and nothing else (design §21).

Why not ``tornado.simple_httpclient``: a streamed answer there is a callback that
Tornado's connection drives, so every network read crossed a handoff (futures both ways,
a loop tick each) before the consumer saw its events, and the request left as two writes
(head, then body) after a dozen layers of per-request setup; keeping connections alive
and aborting a request meant overriding its private connection class. Here the caller
pulls: :meth:`Response.read` is one network read of the body, decoded in the caller's
own task, so the first event is converted and flushed in the loop iteration that read it,
and nothing is read while the caller is busy (backpressure without a handoff).

What it does:

- ``request``: one write of the head and a ``Content-Length`` body (``Connection:
  keep-alive``; no ``Accept-Encoding``, so an upstream sends its stream uncompressed,
  though a gzip answer is still decoded); TLS for ``https`` with the default context
  (certificates and host names verified); an IP-literal host is its own address, a name
  goes through the resolver.
- the answer's head (1xx skipped), then its body: chunked (:class:`ChunkedDecoder`, as
  strict as Tornado), ``Content-Length`` or delimited by the close.
- keep-alive: a connection comes from :class:`ConnectionPool` when one waits for the
  origin, and goes back to it only when the body was read to its last byte and not one
  byte further, from an HTTP/1.1 answer that did not say ``Connection: close``.
- :meth:`Response.close` (or :meth:`UpstreamClient.close`, for all of them) ends a request
  at any point: the connection is closed and a pending read fails with
  ``StreamClosedError``; the caller raises its own reason (an abort, a deadline).

Deadlines stay with the caller (the upstream exchange's idle and drain deadlines, the
model list's): they end a request by closing it. Connecting is bounded here, by
``connect_timeout_s``.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import ssl
import zlib
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from tornado import httputil
from tornado.iostream import IOStream, StreamClosedError
from tornado.netutil import DefaultLoopResolver
from tornado.tcpclient import TCPClient

from relay.clock import Clock
from relay.transport.chunked import ChunkedDecoder
from relay.transport.pool import ConnectionPool, Origin

# One network read of the body at most (Tornado's IOStream reads the socket in 64 KiB).
READ_BYTES: Final = 65536
# A body up to this size is sent in the head's write: the copy (about 0.1 ms per MiB)
# costs less than a second write, which wakes the upstream's reader for the head alone
# (0.25-0.7 ms measured at 108 KB). A larger one follows the head (such a body was
# encoded on a worker thread anyway, RelayingHandler.off_loop).
ONE_WRITE_BYTES: Final = 1 << 20
MAX_HEAD_BYTES: Final = 65536  # Tornado's default max_header_size
MAX_BODY_BYTES: Final = 2**62  # the callers' own limits apply (per event, per response)
USER_AGENT: Final = "reasoning-replay-relay"
_HEAD_END: Final = rb"\r?\n\r?\n"


@functools.cache
def _tls() -> ssl.SSLContext:
    """The system's default verification, made on first use: loading the CA store costs
    ~80 ms, which every start (and every CLI command) would otherwise pay."""
    return ssl.create_default_context()


class _LiteralResolver(DefaultLoopResolver):
    """An IP-literal upstream (a local gateway or proxy) is its own address: no trip
    through the resolver's thread pool on every request. Names resolve as before."""

    async def resolve(
        self, host: str, port: int, family: socket.AddressFamily = socket.AF_UNSPEC
    ) -> list[tuple[int, Any]]:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return await super().resolve(host, port, family)
        kind = socket.AF_INET6 if address.version == 6 else socket.AF_INET
        if family not in (socket.AF_UNSPEC, kind):
            return await super().resolve(host, port, family)  # let it say what is wrong
        return [(kind, (host, port))]


@dataclass(frozen=True)
class Target:
    """Where a URL points: its origin and the request target (path and query)."""

    host: str
    port: int
    tls: bool
    path: str

    @classmethod
    def of(cls, url: str) -> Target:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {parts.scheme}://{parts.hostname or ''}")
        tls = parts.scheme == "https"
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return cls(parts.hostname, parts.port or (443 if tls else 80), tls, path)

    @property
    def origin(self) -> Origin:
        return (self.host, self.port, self.tls)

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.tls else 80
        return host if self.port == default else f"{host}:{self.port}"


def request_head(method: str, target: Target, headers: dict[str, str], body: bytes | None) -> bytes:
    """The request's head: the caller's headers, then Host, keep-alive, a User-Agent and
    the length, unless the caller gave them."""
    lines = [f"{method} {target.path} HTTP/1.1"]
    names = {name.lower() for name in headers}
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if "host" not in names:
        lines.append(f"Host: {target.host_header}")
    if "connection" not in names:
        lines.append("Connection: keep-alive")
    if "user-agent" not in names:  # some gateways refuse a request without one
        lines.append(f"User-Agent: {USER_AGENT}")
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    for line in lines:
        if "\r" in line or "\n" in line:  # a value must not start a header of its own
            raise ValueError("a request header holds a line break")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class Response:
    """One answer: its status and headers, and its body read by :meth:`read`."""

    def __init__(
        self,
        client: UpstreamClient,
        stream: IOStream,
        start: httputil.ResponseStartLine,
        headers: httputil.HTTPHeaders,
        *,
        method: str,
    ) -> None:
        self._client = client
        self._stream = stream
        self.code = start.code
        self.headers = headers
        tokens = {t.strip().lower() for t in headers.get("Connection", "").split(",")}
        self._reusable = start.version == "HTTP/1.1" and "close" not in tokens
        self._decoder: ChunkedDecoder | None = None
        self._remaining: int | None = None  # Content-Length bytes still due
        self._ended = False
        self._released = False
        no_body = method == "HEAD" or self.code in (204, 304) or 100 <= self.code < 200
        if no_body:
            self._ended = True
        elif "chunked" in headers.get("Transfer-Encoding", "").lower():
            self._decoder = ChunkedDecoder(MAX_BODY_BYTES)
        elif "Content-Length" in headers:
            self._remaining = _content_length(headers["Content-Length"])
            self._ended = self._remaining == 0
        else:
            self._reusable = False  # delimited by the close
        encoding = headers.get("Content-Encoding", "").strip().lower()
        # Never asked for (no Accept-Encoding), decoded all the same.
        self._gunzip = zlib.decompressobj(16 + zlib.MAX_WBITS) if encoding == "gzip" else None
        if self._ended:
            self._release()

    @property
    def ended(self) -> bool:
        """The whole body was read."""
        return self._ended

    async def read(self) -> bytes | None:
        """The body bytes of one network read (possibly none, e.g. only chunk framing),
        ``None`` once the body has ended. Raises ``StreamClosedError`` when the
        connection broke or was closed, ``HTTPInputError`` on broken framing."""
        if self._ended:
            return None
        try:
            data = await self._stream.read_bytes(self._wanted(), partial=True)
        except StreamClosedError:
            if self._decoder is None and self._remaining is None:  # delimited by the close
                self._ended = True
                return self._decoded(b"", final=True)
            raise
        if self._decoder is not None:
            body = self._feed_chunked(data)
        elif self._remaining is not None:
            self._remaining -= len(data)
            self._ended = self._remaining == 0
            body = data
        else:
            body = data  # delimited by the close: it ends at StreamClosedError
        body = self._decoded(body, final=self._ended)
        if self._ended:
            self._release()
        return body

    def close(self) -> None:
        """End this request: the connection is closed (a pending read fails)."""
        self._client._live.discard(self)
        if not self._released:
            self._released = True
            self._stream.close()

    def _wanted(self) -> int:
        if self._remaining is not None:
            return min(self._remaining, READ_BYTES)
        return READ_BYTES

    def _feed_chunked(self, data: bytes) -> bytes:
        """Decode one read; bytes past the body's end (none from a sound server: it
        answers one request at a time) make the connection unfit for reuse."""
        decoder = self._decoder
        assert decoder is not None
        pieces: list[bytes] = []
        start, end = 0, len(data)
        while start < end and not decoder.done:
            take = min(end - start, decoder.wanted())
            pieces += decoder.feed(data if take == end else data[start : start + take])
            start += take
        if decoder.done:
            self._ended = True
            if start < end:
                self._reusable = False
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def _decoded(self, body: bytes, *, final: bool) -> bytes:
        if self._gunzip is None:
            return body
        out = self._gunzip.decompress(body)
        return out + self._gunzip.flush() if final else out

    def _release(self) -> None:
        """The body ended: the connection goes back to the pool when it may."""
        if self._released:
            return
        self._released = True
        self._client._live.discard(self)
        if self._reusable:
            self._client.pool.checkin(self._stream)
        else:
            self._stream.close()


class UpstreamClient:
    """Keep-alive HTTP/1.1 requests to the upstreams (module docstring)."""

    def __init__(self, clock: Clock, pool: ConnectionPool | None = None) -> None:
        self.pool = pool or ConnectionPool(clock)
        self._tcp = TCPClient(resolver=_LiteralResolver())
        self._live: set[Response] = set()  # answers not read to their end (closed with us)
        self._dialing: set[IOStream] = set()
        self._closed = False  # close() ran: a dial that completes later is closed at once

    async def request(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        body: bytes | None,
        *,
        connect_timeout_s: float,
    ) -> Response:
        """Send the request and read the answer's head: :meth:`checkout` or
        :meth:`connect`, then :meth:`send`."""
        target = Target.of(url)
        stream = self.checkout(target) or await self.connect(target, connect_timeout_s)
        return await self.send(stream, target, method, headers, body)

    def checkout(self, target: Target) -> IOStream | None:
        """A kept-alive connection to ``target``'s origin, if one waits (no await: a
        request on it starts in the caller's loop iteration)."""
        return self.pool.checkout(target.origin)

    async def connect(self, target: Target, timeout_s: float) -> IOStream:
        """A new connection to ``target``'s origin (TLS for https). Raises ``OSError`` or
        ``TimeoutError`` (past ``timeout_s``), ``StreamClosedError`` when the client was
        closed before the dial completed."""
        stream = await self._tcp.connect(
            target.host,
            target.port,
            ssl_options=_tls() if target.tls else None,
            timeout=timeout_s,
        )
        if self._closed:
            # Closed while dialing (shutdown): close() could not reach a connection that
            # did not exist yet, so it is closed here, never written to nor pooled, and
            # the request fails as one whose connection close() ended.
            stream.close()
            raise StreamClosedError()
        stream.set_nodelay(True)  # a request is one write: nothing to coalesce
        self.pool.remember(stream, target.origin)
        return stream

    async def send(
        self,
        stream: IOStream,
        target: Target,
        method: str,
        headers: dict[str, str],
        body: bytes | None,
    ) -> Response:
        """Write the request on ``stream`` and read the answer's head; closing ``stream``
        meanwhile ends it (``StreamClosedError``). Raises ``StreamClosedError``,
        ``HTTPInputError`` or ``UnsatisfiableReadError``; the stream is then closed."""
        try:
            head = request_head(method, target, headers, body)
            if body and len(body) <= ONE_WRITE_BYTES:
                # One write: head and body leave together (one segment, one wake-up).
                stream.write(head + body).add_done_callback(_retrieved)
            else:  # no copy of a large body for the sake of one write
                stream.write(head).add_done_callback(_retrieved)
                if body:
                    stream.write(body).add_done_callback(_retrieved)
            start, answer_headers = await self._read_head(stream)
            return self._answer(stream, start, answer_headers, method)
        except BaseException:
            stream.close()
            raise

    def close(self) -> None:
        """Close every connection: idle, dialed, and those of unfinished answers; one
        still being dialed is closed when its dial completes (:meth:`connect`)."""
        self._closed = True
        for response in list(self._live):
            response.close()
        for stream in list(self._dialing):
            stream.close()
        self.pool.close()
        self._tcp.close()

    async def _read_head(
        self, stream: IOStream
    ) -> tuple[httputil.ResponseStartLine, httputil.HTTPHeaders]:
        self._dialing.add(stream)  # until the head is in: close() reaches it here
        try:
            while True:
                data = await stream.read_until_regex(_HEAD_END, max_bytes=MAX_HEAD_BYTES)
                text = data.decode("latin-1").lstrip("\r\n")
                first, _, rest = text.partition("\n")
                start = httputil.parse_response_start_line(first.strip())
                if 100 <= start.code < 200 and start.code != 101:
                    continue  # an interim answer: the real one follows
                return start, httputil.HTTPHeaders.parse(rest)
        finally:
            self._dialing.discard(stream)

    def _answer(
        self,
        stream: IOStream,
        start: httputil.ResponseStartLine,
        headers: httputil.HTTPHeaders,
        method: str,
    ) -> Response:
        response = Response(self, stream, start, headers, method=method)
        if not response.ended:
            self._live.add(response)
        return response


def _content_length(value: str) -> int:
    """A Content-Length as Tornado reads one: digits, or a list of one value repeated."""
    values = {v.strip() for v in value.split(",")}
    if len(values) != 1 or not (digits := values.pop()).isascii() or not digits.isdigit():
        raise httputil.HTTPInputError("invalid Content-Length")
    return int(digits)


def _retrieved(done: Any) -> None:
    """A write nobody awaits: a failure shows in the next read; retrieve it here so it is
    never logged as lost."""
    if not done.cancelled():
        done.exception()
