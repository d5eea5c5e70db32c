"""The relay's HTTP/1 server: Tornado's, except that a request Tornado itself refuses still
gets the OpenAI error envelope and a message that says what to fix.

Tornado's ``HTTP1Connection`` answers a malformed request line, header or body framing
with a bare ``400 Bad Request`` (no body), and closes without any answer when a request
head exceeds ``max_header_size`` or a chunk size line exceeds 64 bytes (its IOStream closes
itself when a read passes ``max_bytes``). :class:`RelayHTTP1Connection` changes only that:

- Before Tornado reads a request head, it waits, consuming nothing, until the stream's
  buffer holds a complete head or more than the limit (a zero-width read: the pattern is a
  lookahead). Too much is answered 431. Otherwise Tornado's own head read is satisfied
  from the buffer at once; its ``max_bytes`` is the buffer size (see
  :class:`RelayHTTPServer`), so it cannot close the stream, and a complete head longer
  than the limit is answered 431 when parsed. The wait takes over Tornado's header
  timeout, in two parts: a kept-alive connection waits for a next request's first byte up
  to the idle timeout, and a head must then be whole within the header deadline (from
  the connection's start, for its first request).
- An ``HTTPInputError`` from the head (:meth:`_parse_headers`, :meth:`_can_keep_alive`),
  the framing (:meth:`_read_body` and the body read) or the application's
  ``headers_received`` (Tornado's Host and query checks) leaves as :class:`_Refused`, which
  Tornado's own ``except HTTPInputError`` does not catch, and the connection writes the
  answer (:mod:`relay.transport.protocol_errors`) unless a response has begun, then closes.
- Chunked bodies are read by :class:`~relay.transport.chunked.BulkChunkedHTTP1Connection`,
  whose decoder reports a too-long size line as an error instead of closing the stream.

- An answer begun before the body is read says ``Connection: close``
  (:meth:`RelayHTTP1Connection.write_headers`).

The server (:class:`RelayHTTPServer`) caps the connections it serves and pauses accepting,
with back-off, when ``accept`` fails (out of file descriptors).

A well-formed request costs one more regex search over its head, one more (zero-length)
read and three delegate calls more than with Tornado's connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import secrets
import socket
from asyncio import Future
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final, NoReturn

from tornado import gen, httputil, iostream
from tornado.http1connection import (
    HTTP1ConnectionParameters,
    HTTP1ServerConnection,
    _is_done,
)
from tornado.httpserver import HTTPServer, _HTTPRequestContext
from tornado.ioloop import IOLoop
from tornado.netutil import _DEFAULT_BACKLOG

from relay.clock import Clock, SystemClock
from relay.errors import InternalSignal, RelayError, TooManyConnections
from relay.observability import log
from relay.transport.chunked import BulkChunkedHTTP1Connection
from relay.transport.protocol_errors import (
    CHUNK_LINE_TOO_LONG,
    headers_too_large,
    malformed,
    rejection_bytes,
)

DEFAULT_MAX_HEADER_SIZE: Final = 65536  # Tornado's default
DEFAULT_MAX_BUFFER_SIZE: Final = 104857600  # IOStream's default
DEFAULT_HEADER_TIMEOUT: Final = 30.0  # seconds
ACCEPT_BACKOFF_MIN: Final = 0.01  # seconds
ACCEPT_BACKOFF_MAX: Final = 1.0
LOG_EVERY_S: Final = 60.0  # at most one line this often for connections refused or paused
# Matches, consuming nothing, once the buffer holds a byte: a next request has begun.
_SOME_BYTE: Final = rb"\A(?=[\s\S])"


def head_ready_pattern(limit: int) -> bytes:
    """Matches, with nothing consumed, once the buffer holds a complete head: some lines,
    then an empty one (exactly when Tornado's ``\\r?\\n\\r?\\n`` is found); or else
    matches its first ``limit + 1`` bytes, the sign of a head over the limit."""
    return rb"\A(?:(?=(?:[^\n]*+\n)+?\r?\n)|[\s\S]{%d})" % (limit + 1)


def _new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


class HeadRules:
    """What the connections of one server share: the head limit and its pattern, the
    header deadline (seconds for a whole head, from the connection's start or from the
    first byte of a later request; None: none), how long a kept-alive connection may wait
    for that first byte (``idle``; None: forever), request ids for refusals."""

    __slots__ = ("idle", "limit", "new_id", "pattern", "timeout")

    def __init__(
        self,
        limit: int,
        timeout: float | None,
        new_id: Callable[[str], str] = _new_id,
        *,
        idle: float | None = None,
    ) -> None:
        self.limit = limit
        self.timeout = timeout
        self.idle = idle
        self.new_id = new_id
        self.pattern = head_ready_pattern(limit)


class _Refused(InternalSignal):
    """Carries the client's error past Tornado's ``except HTTPInputError``."""

    def __init__(self, error: RelayError) -> None:
        super().__init__(error.message)
        self.error = error


class _GuardedDelegate(httputil.HTTPMessageDelegate):
    """Passes everything on. An ``HTTPInputError`` from ``headers_received`` (the request
    object refusing its Host header or query string) is kept, not raised: raised, it would
    get Tornado's bare 400. The connection raises it once it has control again."""

    def __init__(self, delegate: httputil.HTTPMessageDelegate) -> None:
        self.delegate = delegate
        self.refused: RelayError | None = None

    def headers_received(
        self,
        start_line: httputil.RequestStartLine | httputil.ResponseStartLine,
        headers: httputil.HTTPHeaders,
    ) -> Awaitable[None] | None:
        try:
            return self.delegate.headers_received(start_line, headers)
        except httputil.HTTPInputError as exc:
            self.refused = malformed(str(exc))
            return None

    def data_received(self, chunk: bytes) -> Awaitable[None] | None:
        return self.delegate.data_received(chunk)

    def finish(self) -> None:
        self.delegate.finish()

    def on_connection_close(self) -> None:
        if self.refused is None:  # else the application never got this request
            self.delegate.on_connection_close()


class RelayHTTP1Connection(BulkChunkedHTTP1Connection):
    """One request on a server connection (see the module docstring)."""

    def __init__(
        self,
        stream: iostream.IOStream,
        params: HTTP1ConnectionParameters,
        context: object,
        head: HeadRules,
        *,
        first: bool = True,
    ) -> None:
        super().__init__(stream, False, params, context)
        self._head = head
        self._first = first  # the connection's first request: no idle wait before it
        self._guard: _GuardedDelegate | None = None

    async def _read_message(self, delegate: httputil.HTTPMessageDelegate) -> bool:
        try:
            if not await self._await_head():
                return False
            self._guard = _GuardedDelegate(delegate)
            return await super()._read_message(self._guard)
        except _Refused as refused:
            await self._refuse(refused.error)
            return False

    async def _await_head(self) -> bool:
        """Until the buffer holds a whole head (True), or too much (431); False, and the
        connection closed without an answer, when a deadline passes first: a kept-alive
        connection waits up to the idle timeout for a next request to begin, and a head
        must be whole within the header deadline of the connection's start (its first
        request) or of its first byte (a later one)."""
        if not self._first and (
            await self._within(self.stream.read_until_regex(_SOME_BYTE), self._head.idle) is None
        ):
            return False
        overflow = await self._within(
            self.stream.read_until_regex(self._head.pattern), self._head.timeout
        )
        if overflow is None:
            return False
        if overflow:  # the first limit + 1 bytes, with no end of head among them
            raise _Refused(headers_too_large(self._head.limit))
        return True

    async def _within(self, read: Awaitable[bytes], seconds: float | None) -> bytes | None:
        """What ``read`` gives within ``seconds``; None, and the connection closed, when
        it gives nothing in time."""
        try:
            if seconds is None or _is_done(read):
                return await read
            data: bytes = await gen.with_timeout(
                self.stream.io_loop.time() + seconds,
                read,
                quiet_exceptions=iostream.StreamClosedError,
            )
        except TimeoutError:
            self.close()
            return None
        return data

    def _parse_headers(self, data: bytes) -> tuple[str, httputil.HTTPHeaders]:
        if len(data) > self._head.limit:
            raise _Refused(headers_too_large(self._head.limit))
        try:
            start_line, headers = super()._parse_headers(data)
            # Tornado parses it right after this, where nothing can catch its error.
            httputil.parse_request_start_line(start_line)
        except httputil.HTTPInputError as exc:
            raise _Refused(malformed(str(exc))) from None
        return start_line, headers

    def _can_keep_alive(
        self, start_line: httputil.RequestStartLine, headers: httputil.HTTPHeaders
    ) -> bool:
        try:  # for HTTP/1.0 it checks the Transfer-Encoding
            return super()._can_keep_alive(start_line, headers)
        except httputil.HTTPInputError as exc:
            raise _Refused(malformed(str(exc))) from None

    def _read_body(
        self,
        code: int,
        headers: httputil.HTTPHeaders,
        delegate: httputil.HTTPMessageDelegate,
    ) -> Awaitable[None] | None:
        if self._guard is not None and self._guard.refused is not None:
            raise _Refused(self._guard.refused)
        try:
            return super()._read_body(code, headers, delegate)
        except httputil.HTTPInputError as exc:
            raise _Refused(malformed(str(exc))) from None

    async def _read_chunked_body(self, delegate: httputil.HTTPMessageDelegate) -> None:
        try:  # (a body with a Content-Length has no framing left to get wrong)
            await super()._read_chunked_body(delegate)
        except httputil.HTTPInputError as exc:
            raise _Refused(malformed(str(exc))) from None

    def _size_line_too_long(self, error: iostream.UnsatisfiableReadError) -> NoReturn:
        raise httputil.HTTPInputError(CHUNK_LINE_TOO_LONG)

    def write_headers(
        self,
        start_line: httputil.RequestStartLine | httputil.ResponseStartLine,
        headers: httputil.HTTPHeaders,
        chunk: bytes | None = None,
    ) -> Future[None]:
        # An answer begun before the body is read (a 401 or 413 from prepare() of a
        # streamed-body handler) ends the connection: Tornado closes rather than read an
        # unread body. Said now, a keep-alive client opens a new connection for its next
        # request instead of sending it into the close.
        if not self._read_finished:
            self._disconnect_on_finish = True
        return super().write_headers(start_line, headers, chunk)

    async def _refuse(self, error: RelayError) -> None:
        request_id = self._head.new_id("req_")
        log.event("request_refused", request_id=request_id, status=error.status, code=error.code)
        # Once the application has begun its answer, a second one would corrupt it.
        if self._response_start_line is None and not self.stream.closed():
            with contextlib.suppress(iostream.StreamClosedError):
                await self.stream.write(rejection_bytes(error, request_id))
        self.close()


class RelayServerConnection(HTTP1ServerConnection):
    """Tornado's server connection, reading each request with :class:`RelayHTTP1Connection`."""

    def __init__(
        self,
        stream: iostream.IOStream,
        params: HTTP1ConnectionParameters,
        context: object,
        head: HeadRules,
    ) -> None:
        super().__init__(stream, params, context)
        self._head = head

    async def _server_request_loop(self, delegate: httputil.HTTPServerConnectionDelegate) -> None:
        # Tornado 6.6's loop; only the connection class differs.
        try:
            first = True
            while True:
                conn = RelayHTTP1Connection(
                    self.stream, self.params, self.context, self._head, first=first
                )
                first = False
                request_delegate = delegate.start_request(self, conn)
                try:
                    ret = await conn.read_response(request_delegate)
                except (
                    iostream.StreamClosedError,
                    iostream.UnsatisfiableReadError,
                    asyncio.CancelledError,
                ):
                    return
                except Exception as exc:  # Tornado logs it whole; its message may quote input
                    log.failure("connection_failed", exc)
                    conn.close()
                    return
                if not ret:
                    return
                await asyncio.sleep(0)
        finally:
            delegate.on_close(self)


class _Acceptor:
    """Tornado's ``netutil.add_accept_handler`` for one listening socket, except when
    ``accept`` fails: out of file descriptors (EMFILE, ENFILE), the waiting connection
    stays queued and the socket stays readable, so Tornado's handler runs, fails and logs
    again at once, a busy loop. Here any failure pauses accepting, for 10 ms doubling up to
    1 s while failures continue (back to 10 ms after an accept succeeds), while the open
    connections finish or reach their deadlines and free descriptors."""

    def __init__(
        self,
        sock: socket.socket,
        on_accept: Callable[[socket.socket, Any], None],
        on_pause: Callable[[OSError, float], None],
    ) -> None:
        self._sock = sock
        self._on_accept = on_accept
        self._on_pause = on_pause
        self._loop = IOLoop.current()
        self._delay = ACCEPT_BACKOFF_MIN
        self._resume_at: object | None = None  # the IOLoop timeout of a pause
        self._removed = False
        self._loop.add_handler(sock, self._accept, IOLoop.READ)

    def _accept(self, fd: object, events: int) -> None:
        # As Tornado: at most a backlog's worth at a time, so that other work runs.
        for _ in range(_DEFAULT_BACKLOG):
            if self._removed:
                return
            try:
                connection, address = self._sock.accept()
            except BlockingIOError:  # all accepted
                return
            except ConnectionAbortedError:  # closed while queued
                continue
            except OSError as exc:
                self._pause(exc)
                return
            self._delay = ACCEPT_BACKOFF_MIN
            self._on_accept(connection, address)

    def _pause(self, exc: OSError) -> None:
        self._loop.remove_handler(self._sock)
        self._resume_at = self._loop.call_later(self._delay, self._resume)
        self._on_pause(exc, self._delay)
        self._delay = min(self._delay * 2, ACCEPT_BACKOFF_MAX)

    def _resume(self) -> None:
        self._resume_at = None
        if not self._removed:
            self._loop.add_handler(self._sock, self._accept, IOLoop.READ)

    def remove(self) -> None:
        """Stop accepting (as the callable ``add_accept_handler`` returns)."""
        self._removed = True
        if self._resume_at is not None:
            self._loop.remove_timeout(self._resume_at)
            self._resume_at = None
        else:
            self._loop.remove_handler(self._sock)


class _Throttled:
    """One log line per ``every_s`` for a recurring condition, counting those not logged."""

    def __init__(self, clock: Clock, every_s: float) -> None:
        self._clock = clock
        self._every_s = every_s
        self._last: float | None = None
        self._since = 0  # occurrences since the last line, that one included

    def due(self) -> int:
        """0 while quiet; else the occurrences the line now due covers."""
        self._since += 1
        now = self._clock.monotonic()
        if self._last is not None and now - self._last < self._every_s:
            return 0
        self._last, count, self._since = now, self._since, 0
        return count


class RelayHTTPServer(HTTPServer):
    """``HTTPServer`` whose connections are :class:`RelayServerConnection`\\ s.

    Takes Tornado's arguments, plus ``new_id`` (request ids for refused requests),
    ``header_timeout`` (seconds for a request head; see :class:`HeadRules`; Tornado's
    ``idle_connection_timeout`` remains the wait between requests of a kept-alive
    connection), ``max_connections`` and ``clock``. ``max_header_size`` is the relay's
    limit (431 above it); Tornado's own head read gets the buffer size, which it can never
    exceed (see the module docstring).

    Connections over ``max_connections`` are answered 503 ``too_many_connections`` with
    ``Connection: close`` as they are accepted, without reading anything from them (a
    client still sending may see the close as a reset instead), so they cost no more than
    the accept. Accepting pauses when it fails (:class:`_Acceptor`). Both log one line a
    minute at most, with the count since the last.
    """

    def initialize(
        self,
        *args: Any,
        new_id: Callable[[str], str] | None = None,
        header_timeout: float | None = DEFAULT_HEADER_TIMEOUT,
        max_connections: int | None = None,
        clock: Clock | None = None,
        **kwargs: Any,
    ) -> None:
        limit = kwargs.pop("max_header_size", None) or DEFAULT_MAX_HEADER_SIZE
        buffer = kwargs.pop("max_buffer_size", None) or DEFAULT_MAX_BUFFER_SIZE
        if limit >= buffer:
            raise ValueError("max_header_size must be below max_buffer_size")
        kwargs.update(max_header_size=buffer, max_buffer_size=buffer)
        super().initialize(*args, **kwargs)
        # The wait for the head keeps the timeouts; Tornado's own read, which that wait
        # always satisfies from the buffer, needs none.
        self._head = HeadRules(
            limit,
            header_timeout,
            new_id or _new_id,
            idle=self.conn_params.header_timeout,  # Tornado's idle_connection_timeout
        )
        self.conn_params.header_timeout = None
        self._max_connections = max_connections
        clock = clock or SystemClock()
        self._refusals = _Throttled(clock, LOG_EVERY_S)
        self._pauses = _Throttled(clock, LOG_EVERY_S)

    def add_sockets(self, sockets: Iterable[socket.socket]) -> None:
        # As TCPServer.add_sockets, with the relay's accept handler.
        for sock in sockets:
            self._sockets[sock.fileno()] = sock
            acceptor = _Acceptor(sock, self._accepted, self._accept_paused)
            self._handlers[sock.fileno()] = acceptor.remove

    def _accepted(self, connection: socket.socket, address: Any) -> None:
        cap = self._max_connections
        if cap is None or len(self._connections) < cap:
            self._handle_connection(connection, address)
            return
        error = TooManyConnections(
            f"the relay is serving its maximum of {cap} connections (RELAY_MAX_CONNECTIONS); "
            "retry shortly, or raise RELAY_MAX_CONNECTIONS"
        )
        with contextlib.suppress(OSError):  # best effort: a full buffer or a gone peer
            connection.setblocking(False)
            connection.send(rejection_bytes(error, self._head.new_id("req_"), retry_after=1))
            # Closed with unread bytes, the socket would send a reset, and the client's
            # kernel could drop the answer with it: discard what has arrived (one read).
            connection.recv(65536)
        connection.close()
        if count := self._refusals.due():
            log.event("connections_refused", level=logging.WARNING, count=count, limit=cap)

    def _accept_paused(self, exc: OSError, delay: float) -> None:
        if count := self._pauses.due():
            reason = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
            log.event(
                "accept_paused",
                level=logging.WARNING,
                reason=reason,
                count=count,
                connections=len(self._connections),
                retry_ms=round(delay * 1000),
            )

    def handle_stream(self, stream: iostream.IOStream, address: tuple[Any, ...]) -> None:
        # As HTTPServer.handle_stream, with the relay's server connection.
        context = _HTTPRequestContext(stream, address, self.protocol, self.trusted_downstream)
        conn = RelayServerConnection(stream, self.conn_params, context, self._head)
        self._connections.add(conn)
        conn.start_serving(self)
