"""The relay's HTTP/1.1 server, on Tornado's public surface only.

Tornado's own ``HTTPServer`` answers a malformed request line, header or body framing with
a bare ``400 Bad Request`` (no body), closes without any answer when a head exceeds
``max_header_size`` or a chunk size line exceeds 64 bytes, and offers no hook for any of
it but private methods. So the relay runs its own connection, written against
``tornado.iostream.IOStream`` reads and writes, ``tornado.httputil``'s parsers and its
``HTTPConnection`` / ``HTTPMessageDelegate`` / ``HTTPServerConnectionDelegate`` interfaces
(``tornado.web.Application.start_request``), and its own accept loop on ``IOLoop``
handlers: nothing a Tornado release may change without notice (its underscore names; a
test scans ``relay/`` for them).

Per connection (:class:`ServerConnection`), one request after another:

- The head is one read (:func:`~relay.transport.request_head.head_pattern`): a whole head,
  or the first ``limit + 1`` bytes, answered 431. Deadlines: a kept-alive connection waits
  for a next request's first byte up to the idle timeout, and a head must then be whole
  within the header deadline (from the connection's start, for its first request); either
  passing closes the connection without an answer.
- :func:`~relay.transport.request_head.parse_head` judges the request line, the headers
  and keep-alive before the application sees them, ``body_framing`` the framing after
  (Tornado's order: a handler refusing from the head answers first). Their errors, the
  application's own head checks (``HTTPServerRequest`` refusing the Host header or query
  string: ``HTTPInputError`` from ``headers_received``, after which the application is not
  told of the request) and the body's framing errors are answered with the OpenAI
  envelope (:mod:`relay.transport.protocol_errors`) unless a response has begun, then the
  connection closes.
- A ``Content-Length`` body is read in ``chunk_size`` pieces; a chunked one with
  :func:`~relay.transport.chunked.read_chunked_body`, whose size-line limit is a 400. The
  whole body has the body timeout (the relay's idle timeout), as with Tornado.
- The answer (:class:`_Exchange`, the request's ``HTTPConnection``) follows Tornado's
  rules: chunked transfer coding for an HTTP/1.1 answer without a Content-Length (none for
  HEAD, 1xx, 204 and 304), ``Connection: close`` when the connection ends after it,
  ``Keep-Alive`` for an HTTP/1.0 client that asked, ``100 (Continue)`` for
  ``Expect: 100-continue``, an error for writing more or less than the Content-Length.
  An answer begun before the body is read says ``Connection: close`` and ends the
  connection (Tornado closes rather than read an unread body; said at once, a keep-alive
  client opens a new connection for its next request instead of sending it into the
  close).
- TCP_NODELAY is set once per connection: the relay's answers leave in whole writes
  (Tornado turns it on for each answer's end and off again after).

The server (:class:`RelayHTTPServer`) caps the connections it serves and pauses accepting,
with back-off, when ``accept`` fails (out of file descriptors).

Less work than Tornado's connection per request: one regex read for the head, no
delegate wrappers, one timer per deadline instead of a wrapping future, no Nagle toggles.
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
from typing import Any, Final

from tornado import httputil, iostream
from tornado.escape import native_str
from tornado.ioloop import IOLoop

from relay.clock import Clock, SystemClock
from relay.errors import InternalSignal, RelayError, TooManyConnections
from relay.observability import log
from relay.transport.chunked import YIELD_THRESHOLD, read_chunked_body
from relay.transport.protocol_errors import CHUNK_LINE_TOO_LONG, malformed, rejection_bytes
from relay.transport.request_head import (
    RequestHead,
    body_framing,
    head_pattern,
    parse_head,
)

__all__ = [
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_MAX_BUFFER_SIZE",
    "DEFAULT_MAX_HEADER_SIZE",
    "HeadRules",
    "RelayHTTPServer",
    "RequestContext",
    "ServerConnection",
]

DEFAULT_MAX_HEADER_SIZE: Final = 65536  # Tornado's default
DEFAULT_MAX_BUFFER_SIZE: Final = 104857600  # IOStream's default
DEFAULT_HEADER_TIMEOUT: Final = 30.0  # seconds
DEFAULT_IDLE_TIMEOUT: Final = 3600.0  # seconds, Tornado's idle_connection_timeout default
DEFAULT_CHUNK_SIZE: Final = 65536  # bytes read and handed to the application at a time
ACCEPT_BACKOFF_MIN: Final = 0.01  # seconds
ACCEPT_BACKOFF_MAX: Final = 1.0
ACCEPT_BATCH: Final = 128  # accepts per readable event, as Tornado (its listen backlog)
LOG_EVERY_S: Final = 60.0  # at most one line this often for connections refused or paused
# Matches, consuming nothing, once the buffer holds a byte: a next request has begun.
_SOME_BYTE: Final = rb"\A(?=[\s\S])"
_CONTINUE: Final = b"HTTP/1.1 100 (Continue)\r\n\r\n"


def _new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


class HeadRules:
    """What the connections of one server share: the head limit and its pattern, the
    header deadline (seconds for a whole head, from the connection's start or from the
    first byte of a later request; None: none), how long a kept-alive connection may wait
    for that first byte (``idle``; None: forever), the body timeout, body and read sizes,
    request ids for refusals."""

    __slots__ = (
        "body_timeout",
        "chunk_size",
        "idle",
        "limit",
        "max_body_size",
        "new_id",
        "no_keep_alive",
        "pattern",
        "timeout",
    )

    def __init__(
        self,
        limit: int,
        timeout: float | None,
        new_id: Callable[[str], str] = _new_id,
        *,
        idle: float | None = None,
        body_timeout: float | None = None,
        max_body_size: int = DEFAULT_MAX_BUFFER_SIZE,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        no_keep_alive: bool = False,
    ) -> None:
        self.limit = limit
        self.timeout = timeout
        self.idle = idle
        self.body_timeout = body_timeout
        self.max_body_size = max_body_size
        self.chunk_size = chunk_size
        self.no_keep_alive = no_keep_alive
        self.new_id = new_id
        self.pattern = head_pattern(limit)


class RequestContext:
    """``connection.context``: where ``HTTPServerRequest`` reads ``remote_ip`` and
    ``protocol`` (a Unix socket's peer is ``0.0.0.0``, as with Tornado)."""

    __slots__ = ("address", "protocol", "remote_ip")

    def __init__(self, stream: iostream.IOStream, address: Any, protocol: str = "http") -> None:
        self.address = address
        family = stream.socket.family if stream.socket is not None else None
        inet = family in (socket.AF_INET, socket.AF_INET6) and address is not None
        self.remote_ip: str = address[0] if inet else "0.0.0.0"  # noqa: S104 (a peer, not a bind)
        self.protocol = protocol

    def __str__(self) -> str:
        return self.remote_ip


class _Refused(InternalSignal):
    """The client's error, to be answered on the connection (if no answer has begun)."""

    def __init__(self, error: RelayError) -> None:
        super().__init__(error.message)
        self.error = error


class _Deadline:
    """Closes ``stream`` after ``seconds`` unless stopped first (a pending read then fails
    with ``StreamClosedError``)."""

    __slots__ = ("_handle", "_loop", "_stream", "expired")

    def __init__(self, stream: iostream.IOStream, seconds: float) -> None:
        self._stream = stream
        self._loop = stream.io_loop
        self.expired = False
        self._handle = self._loop.call_later(seconds, self._expire)

    def _expire(self) -> None:
        self.expired = True
        self._stream.close()

    def stop(self) -> None:
        self._loop.remove_timeout(self._handle)


async def _within(
    stream: iostream.IOStream, read: Awaitable[bytes], seconds: float | None
) -> bytes:
    """What ``read`` gives; ``StreamClosedError`` when it gives nothing within ``seconds``
    (the stream closed)."""
    if seconds is None or (isinstance(read, Future) and read.done()):
        return await read
    deadline = _Deadline(stream, seconds)
    try:
        return await read
    finally:
        deadline.stop()


def _settled(write: Future[None]) -> Future[None]:
    """A write's future for the application: done once ``write`` is, and (as Tornado's)
    successful when the stream closed meanwhile, which the close callback reports."""
    settled: Future[None] = Future()

    def done(future: Future[None]) -> None:
        exc = future.exception()
        if settled.done():
            return
        if exc is None or isinstance(exc, iostream.StreamClosedError):
            settled.set_result(None)
        else:
            settled.set_exception(exc)

    if write.done():
        done(write)
    else:
        write.add_done_callback(done)
    return settled


def _closed_write() -> Future[None]:
    failed: Future[None] = Future()
    failed.set_exception(iostream.StreamClosedError())
    failed.exception()  # retrieved: the caller may drop it
    return failed


class _Exchange(httputil.HTTPConnection):
    """One request's ``HTTPConnection``: what the application writes its answer through."""

    __slots__ = (
        "_chunking",
        "_close_callback",
        "_pending",
        "_remaining",
        "context",
        "disconnect",
        "finished",
        "head",
        "read_finished",
        "response_started",
        "stream",
        "write_finished",
    )

    def __init__(
        self, stream: iostream.IOStream, context: RequestContext, head: RequestHead
    ) -> None:
        self.stream = stream
        self.context = context
        self.head = head
        self.disconnect = not head.keep_alive  # close once the answer is out
        self.read_finished = False
        self.write_finished = False
        self.response_started = False
        self.finished: Future[None] = Future()  # the answer is out (or the stream closed)
        self._chunking = False
        self._remaining: int | None = None  # Content-Length still due
        self._pending: Future[None] | None = None
        self._close_callback: Callable[[], None] | None = None

    def set_close_callback(self, callback: Callable[[], None] | None) -> None:
        self._close_callback = callback

    def connection_closed(self) -> None:
        """The stream closed while the application was answering."""
        callback, self._close_callback = self._close_callback, None
        if callback is not None:
            callback()
        if not self.finished.done():
            self.finished.set_result(None)

    def write_headers(
        self,
        start_line: httputil.RequestStartLine | httputil.ResponseStartLine,
        headers: httputil.HTTPHeaders,
        chunk: bytes | None = None,
    ) -> Future[None]:
        assert isinstance(start_line, httputil.ResponseStartLine)
        self.response_started = True
        request = self.head.start_line
        code = start_line.code
        if not self.read_finished:  # the body stays unread: the connection must end
            self.disconnect = True
        http11 = request.version == "HTTP/1.1"
        self._chunking = (
            http11
            and request.method != "HEAD"
            and code not in (204, 304)
            and not 100 <= code < 200
            and "Content-Length" not in headers
        )
        if http11 and self.disconnect:
            headers["Connection"] = "close"
        elif (
            request.version == "HTTP/1.0"
            and self.head.headers.get("Connection", "").lower() == "keep-alive"
        ):
            headers["Connection"] = "Keep-Alive"
        if self._chunking:
            headers["Transfer-Encoding"] = "chunked"
        if request.method == "HEAD" or code == 304:
            self._remaining = 0
        elif "Content-Length" in headers:
            self._remaining = int(headers["Content-Length"])
        else:
            self._remaining = None
        lines = [f"HTTP/1.1 {code} {start_line.reason}"]
        lines += [f"{native_str(name)}: {native_str(value)}" for name, value in headers.get_all()]
        for line in lines:
            if "\r" in line or "\n" in line:  # a header injected into the answer
                raise ValueError(f"Illegal characters (CR or LF) in header: {line!r}")
        if self.stream.closed():
            return _closed_write()
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin1")
        if chunk:
            data += self._frame(chunk)
        self._pending = self.stream.write(data)
        return _settled(self._pending)

    def _frame(self, chunk: bytes) -> bytes:
        if self._remaining is not None:
            self._remaining -= len(chunk)
            if self._remaining < 0:
                self.stream.close()  # no framing error goes further
                raise httputil.HTTPOutputError("Tried to write more data than Content-Length")
        if self._chunking and chunk:  # (an empty chunk would end the body)
            return b"%x\r\n%b\r\n" % (len(chunk), chunk)
        return chunk

    def write(self, chunk: bytes) -> Future[None]:
        if self.stream.closed():
            return _closed_write()
        self._pending = self.stream.write(self._frame(chunk))
        return _settled(self._pending)

    def finish(self) -> None:
        if self._remaining and not self.stream.closed():
            self.stream.close()
            raise httputil.HTTPOutputError(
                f"Tried to write {self._remaining} bytes less than Content-Length"
            )
        if self._chunking and not self.stream.closed():
            self._pending = self.stream.write(b"0\r\n\r\n")
        self.write_finished = True
        if not self.read_finished:  # closing is the only way not to read the rest
            self.disconnect = True
        if self._pending is None or self._pending.done():
            self._end()
        else:
            self._pending.add_done_callback(self._end)

    def _end(self, _: object = None) -> None:
        self._close_callback = None
        if self.disconnect:
            self.stream.set_close_callback(None)
            self.stream.close()
        if not self.finished.done():
            self.finished.set_result(None)


class ServerConnection:
    """One accepted connection, serving its requests one after another (see the module
    docstring) for ``app`` (``tornado.web.Application``, or any
    ``HTTPServerConnectionDelegate``)."""

    def __init__(
        self,
        stream: iostream.IOStream,
        context: RequestContext,
        rules: HeadRules,
        app: httputil.HTTPServerConnectionDelegate,
    ) -> None:
        self.stream = stream
        self.context = context
        self._rules = rules
        self._app = app
        self._serving: asyncio.Task[None] | None = None

    def start(self, on_close: Callable[[ServerConnection], None]) -> None:
        self._serving = asyncio.ensure_future(self._serve(on_close))

    async def close(self) -> None:
        """Close the connection; returns once its loop has ended."""
        self.stream.close()
        if self._serving is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._serving

    async def _serve(self, on_close: Callable[[ServerConnection], None]) -> None:
        try:
            first = True
            while await self._serve_one(first):
                first = False
                await asyncio.sleep(0)  # as Tornado: pipelined requests take turns
        except (iostream.StreamClosedError, asyncio.CancelledError):
            pass
        except Exception as exc:  # logged by type and place: its text may quote input
            log.failure("connection_failed", exc)
            self.stream.close()
        finally:
            on_close(self)

    async def _serve_one(self, first: bool) -> bool:
        """One request and its answer; whether the connection may serve another."""
        exchange: _Exchange | None = None
        try:
            head = await self._read_head(first)
            exchange = _Exchange(self.stream, self.context, head)
            return await self._exchange(exchange)
        except _Refused as refused:
            await self._refuse(refused.error, exchange)
        except httputil.HTTPInputError as exc:
            await self._refuse(malformed(str(exc)), exchange)
        except iostream.UnsatisfiableReadError:  # a chunk size line over 64 bytes
            await self._refuse(malformed(CHUNK_LINE_TOO_LONG), exchange)
        return False

    async def _read_head(self, first: bool) -> RequestHead:
        rules, stream = self._rules, self.stream
        if not first:  # between requests: the idle timeout, until a first byte
            await _within(stream, stream.read_until_regex(_SOME_BYTE), rules.idle)
        data = await _within(stream, stream.read_until_regex(rules.pattern), rules.timeout)
        try:
            return parse_head(data, limit=rules.limit, no_keep_alive=rules.no_keep_alive)
        except RelayError as error:
            raise _Refused(error) from None

    async def _exchange(self, exchange: _Exchange) -> bool:
        head, stream = exchange.head, self.stream
        delegate = self._app.start_request(self, exchange)
        told = True  # the application knows of this request: it hears of a close
        try:
            try:
                ready = delegate.headers_received(head.start_line, head.headers)
            except httputil.HTTPInputError as exc:  # it refused the Host or the query
                told = False
                raise _Refused(malformed(str(exc))) from None
            if ready is not None:
                await ready
            if head.headers.get("Expect") == "100-continue" and not exchange.write_finished:
                stream.write(_CONTINUE)
            try:
                length, chunked = body_framing(head.headers, self._rules.max_body_size)
            except RelayError as error:
                raise _Refused(error) from None
            if chunked or length:
                await self._read_body(exchange, delegate, length)
            exchange.read_finished = True
            if not exchange.write_finished:
                delegate.finish()
                told = False  # from here on, the set_close_callback callback hears of it
            if not exchange.finished.done() and not stream.closed():
                stream.set_close_callback(exchange.connection_closed)
                await exchange.finished
            return not stream.closed()
        finally:
            if told:
                try:
                    delegate.on_connection_close()
                except Exception as exc:  # as Tornado: logged, the connection closes anyway
                    log.failure("connection_failed", exc)
            if not stream.closed():
                stream.set_close_callback(None)

    async def _read_body(
        self,
        exchange: _Exchange,
        delegate: httputil.HTTPMessageDelegate,
        length: int | None,  # None: chunked
    ) -> None:
        rules, stream = self._rules, self.stream

        async def deliver(data: bytes) -> None:
            if not exchange.write_finished:  # else no one reads it
                ready = delegate.data_received(data)
                if ready is not None:
                    await ready

        deadline = None if rules.body_timeout is None else _Deadline(stream, rules.body_timeout)
        try:
            if length is None:
                await read_chunked_body(stream, rules.max_body_size, rules.chunk_size, deliver)
                return
            remaining = length
            work = 0
            while remaining > 0:
                data = await stream.read_bytes(min(rules.chunk_size, remaining), partial=True)
                remaining -= len(data)
                await deliver(data)
                work += len(data)
                if work >= YIELD_THRESHOLD:
                    work = 0
                    await asyncio.sleep(0)
        finally:
            if deadline is not None:
                deadline.stop()
                if deadline.expired:
                    log.event("connection_closed", reason="body_timeout")

    async def _refuse(self, error: RelayError, exchange: _Exchange | None) -> None:
        request_id = self._rules.new_id("req_")
        log.event("request_refused", request_id=request_id, status=error.status, code=error.code)
        # Once the application has begun its answer, a second one would corrupt it.
        begun = exchange is not None and exchange.response_started
        if not begun and not self.stream.closed():
            with contextlib.suppress(iostream.StreamClosedError):
                await self.stream.write(rejection_bytes(error, request_id))
        self.stream.close()


class _Acceptor:
    """What Tornado's ``netutil.add_accept_handler`` does for one listening socket, except when
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
        for _ in range(ACCEPT_BATCH):
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


class RelayHTTPServer:
    """The relay's HTTP/1.1 server for ``app`` (a ``tornado.web.Application``).

    ``header_timeout``: seconds for a request head (see :class:`HeadRules`);
    ``idle_connection_timeout``: the wait between requests of a kept-alive connection
    (Tornado's default: an hour), also the body timeout unless ``body_timeout`` is given;
    ``max_header_size``: the head limit (431 above it); ``max_body_size``: the largest body
    (default ``max_buffer_size``); ``new_id``: request ids for refused requests.

    Connections over ``max_connections`` are answered 503 ``too_many_connections`` with
    ``Connection: close`` as they are accepted, without reading anything from them (a
    client still sending may see the close as a reset instead), so they cost no more than
    the accept. Accepting pauses when it fails (:class:`_Acceptor`). Both log one line a
    minute at most, with the count since the last.
    """

    def __init__(
        self,
        app: httputil.HTTPServerConnectionDelegate,
        *,
        idle_connection_timeout: float | None = None,
        header_timeout: float | None = DEFAULT_HEADER_TIMEOUT,
        body_timeout: float | None = None,
        max_header_size: int | None = None,
        max_body_size: int | None = None,
        max_buffer_size: int | None = None,
        chunk_size: int | None = None,
        no_keep_alive: bool = False,
        max_connections: int | None = None,
        new_id: Callable[[str], str] | None = None,
        clock: Clock | None = None,
    ) -> None:
        limit = max_header_size or DEFAULT_MAX_HEADER_SIZE
        self._buffer = max_buffer_size or DEFAULT_MAX_BUFFER_SIZE
        if limit >= self._buffer:
            raise ValueError("max_header_size must be below max_buffer_size")
        self._chunk_size = chunk_size or DEFAULT_CHUNK_SIZE
        self._app = app
        self._rules = HeadRules(
            limit,
            header_timeout,
            new_id or _new_id,
            idle=idle_connection_timeout or DEFAULT_IDLE_TIMEOUT,
            body_timeout=body_timeout,
            max_body_size=self._buffer if max_body_size is None else max_body_size,
            chunk_size=self._chunk_size,
            no_keep_alive=no_keep_alive,
        )
        self._max_connections = max_connections
        self.connections: set[ServerConnection] = set()
        self._sockets: list[socket.socket] = []
        self._acceptors: list[_Acceptor] = []
        clock = clock or SystemClock()
        self._refusals = _Throttled(clock, LOG_EVERY_S)
        self._pauses = _Throttled(clock, LOG_EVERY_S)

    def add_sockets(self, sockets: Iterable[socket.socket]) -> None:
        """Serve connections accepted on these listening sockets."""
        for sock in sockets:
            self._sockets.append(sock)
            self._acceptors.append(_Acceptor(sock, self._accepted, self._accept_paused))

    def stop(self) -> None:
        """Stop accepting and close the listening sockets; connections stay open."""
        for acceptor in self._acceptors:
            acceptor.remove()
        for sock in self._sockets:
            sock.close()
        self._acceptors.clear()
        self._sockets.clear()

    async def close_all_connections(self) -> None:
        """Close every open connection; returns once their loops have ended."""
        while self.connections:
            await next(iter(self.connections)).close()

    def _accepted(self, connection: socket.socket, address: Any) -> None:
        cap = self._max_connections
        if cap is None or len(self.connections) < cap:
            self._serve(connection, address)
            return
        error = TooManyConnections(
            f"the relay is serving its maximum of {cap} connections (RELAY_MAX_CONNECTIONS); "
            "retry shortly, or raise RELAY_MAX_CONNECTIONS"
        )
        with contextlib.suppress(OSError):  # best effort: a full buffer or a gone peer
            connection.setblocking(False)
            connection.send(rejection_bytes(error, self._rules.new_id("req_"), retry_after=1))
            # Closed with unread bytes, the socket would send a reset, and the client's
            # kernel could drop the answer with it: discard what has arrived (one read).
            connection.recv(65536)
        connection.close()
        if count := self._refusals.due():
            log.event("connections_refused", level=logging.WARNING, count=count, limit=cap)

    def _serve(self, connection: socket.socket, address: Any) -> None:
        stream = iostream.IOStream(
            connection, max_buffer_size=self._buffer, read_chunk_size=self._chunk_size
        )
        stream.set_nodelay(True)
        served = ServerConnection(stream, RequestContext(stream, address), self._rules, self._app)
        self.connections.add(served)
        served.start(self.connections.discard)

    def _accept_paused(self, exc: OSError, delay: float) -> None:
        if count := self._pauses.due():
            reason = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
            log.event(
                "accept_paused",
                level=logging.WARNING,
                reason=reason,
                count=count,
                connections=len(self.connections),
                retry_ms=round(delay * 1000),
            )
