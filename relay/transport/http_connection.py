"""One accepted connection of the relay's HTTP/1.1 server (:class:`ServerConnection`),
serving its requests one after another, on Tornado's public surface only: ``IOStream``
reads and writes, ``httputil``'s parsers and the ``HTTPServerConnectionDelegate``
interface (``tornado.web.Application.start_request``). Each request's answer is an
:class:`~relay.transport.http_exchange.Exchange`.

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
  ``Expect: 100-continue`` is answered ``100 (Continue)`` before the body is read.
- TCP_NODELAY is set once per connection: the relay's answers leave in whole writes
  (Tornado turns it on for each answer's end and off again after).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from asyncio import Future
from collections.abc import Awaitable, Callable
from typing import Final

from tornado import httputil, iostream

from relay.errors import InternalSignal, RelayError
from relay.observability import log
from relay.transport.chunked import YIELD_THRESHOLD, read_chunked_body
from relay.transport.http_exchange import Exchange, RequestContext
from relay.transport.protocol_errors import CHUNK_LINE_TOO_LONG, malformed, rejection_bytes
from relay.transport.request_head import RequestHead, body_framing, head_pattern, parse_head

DEFAULT_MAX_HEADER_SIZE: Final = 65536  # Tornado's default
DEFAULT_MAX_BUFFER_SIZE: Final = 104857600  # IOStream's default
DEFAULT_HEADER_TIMEOUT: Final = 30.0  # seconds
DEFAULT_IDLE_TIMEOUT: Final = 3600.0  # seconds, Tornado's idle_connection_timeout default
DEFAULT_CHUNK_SIZE: Final = 65536  # bytes read and handed to the application at a time
# Matches, consuming nothing, once the buffer holds a byte: a next request has begun.
_SOME_BYTE: Final = rb"\A(?=[\s\S])"
_CONTINUE: Final = b"HTTP/1.1 100 (Continue)\r\n\r\n"


def random_id(prefix: str) -> str:
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
        new_id: Callable[[str], str] = random_id,
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
        exchange: Exchange | None = None
        try:
            head = await self._read_head(first)
            exchange = Exchange(self.stream, self.context, head)
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

    async def _exchange(self, exchange: Exchange) -> bool:
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
        exchange: Exchange,
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

    async def _refuse(self, error: RelayError, exchange: Exchange | None) -> None:
        request_id = self._rules.new_id("req_")
        log.event("request_refused", request_id=request_id, status=error.status, code=error.code)
        # Once the application has begun its answer, a second one would corrupt it.
        begun = exchange is not None and exchange.response_started
        if not begun and not self.stream.closed():
            with contextlib.suppress(iostream.StreamClosedError):
                await self.stream.write(rejection_bytes(error, request_id))
        self.stream.close()
