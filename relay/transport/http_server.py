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
  timeout.
- An ``HTTPInputError`` from the head (:meth:`_parse_headers`, :meth:`_can_keep_alive`),
  the framing (:meth:`_read_body` and the body read) or the application's
  ``headers_received`` (Tornado's Host and query checks) leaves as :class:`_Refused`, which
  Tornado's own ``except HTTPInputError`` does not catch, and the connection writes the
  answer (:mod:`relay.transport.protocol_errors`) unless a response has begun, then closes.
- Chunked bodies are read by :class:`~relay.transport.chunked.BulkChunkedHTTP1Connection`,
  whose decoder reports a too-long size line as an error instead of closing the stream.

A well-formed request costs one more regex search over its head, one more (zero-length)
read and three delegate calls more than with Tornado's connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from asyncio import Future
from collections.abc import Awaitable, Callable
from typing import Any, Final, NoReturn

from tornado import gen, httputil, iostream
from tornado.http1connection import (
    HTTP1ConnectionParameters,
    HTTP1ServerConnection,
    _is_done,
)
from tornado.httpserver import HTTPServer, _HTTPRequestContext

from relay import log
from relay.errors import RelayError
from relay.transport.chunked import BulkChunkedHTTP1Connection
from relay.transport.protocol_errors import (
    CHUNK_LINE_TOO_LONG,
    headers_too_large,
    malformed,
    rejection_bytes,
)

DEFAULT_MAX_HEADER_SIZE: Final = 65536  # Tornado's default
DEFAULT_MAX_BUFFER_SIZE: Final = 104857600  # IOStream's default


def head_ready_pattern(limit: int) -> bytes:
    """Matches, with nothing consumed, once the buffer holds a complete head: some lines,
    then an empty one (exactly when Tornado's ``\\r?\\n\\r?\\n`` is found); or else
    matches its first ``limit + 1`` bytes, the sign of a head over the limit."""
    return rb"\A(?:(?=(?:[^\n]*+\n)+?\r?\n)|[\s\S]{%d})" % (limit + 1)


def _new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


class HeadRules:
    """What the connections of one server share: the head limit and its pattern, the
    header timeout (in seconds; None: none), request ids for refusals."""

    __slots__ = ("limit", "new_id", "pattern", "timeout")

    def __init__(
        self, limit: int, timeout: float | None, new_id: Callable[[str], str] = _new_id
    ) -> None:
        self.limit = limit
        self.timeout = timeout
        self.new_id = new_id
        self.pattern = head_ready_pattern(limit)


class _Refused(Exception):
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
    ) -> None:
        super().__init__(stream, False, params, context)
        self._head = head
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
        """Until the buffer holds a whole head (True), or too much (431); False when the
        header timeout passes first (Tornado's, as for its own head read)."""
        future = self.stream.read_until_regex(self._head.pattern)
        timeout = self._head.timeout
        try:
            if timeout is None or _is_done(future):
                overflow = await future
            else:
                overflow = await gen.with_timeout(
                    self.stream.io_loop.time() + timeout,
                    future,
                    quiet_exceptions=iostream.StreamClosedError,
                )
        except TimeoutError:
            self.close()
            return False
        if overflow:  # the first limit + 1 bytes, with no end of head among them
            raise _Refused(headers_too_large(self._head.limit))
        return True

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
            while True:
                conn = RelayHTTP1Connection(self.stream, self.params, self.context, self._head)
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


class RelayHTTPServer(HTTPServer):
    """``HTTPServer`` whose connections are :class:`RelayServerConnection`\\ s.

    Takes Tornado's arguments, plus ``new_id`` (request ids for refused requests).
    ``max_header_size`` is the relay's limit (431 above it); Tornado's own head read gets
    the buffer size, which it can never exceed (see the module docstring).
    """

    def initialize(
        self, *args: Any, new_id: Callable[[str], str] | None = None, **kwargs: Any
    ) -> None:
        limit = kwargs.pop("max_header_size", None) or DEFAULT_MAX_HEADER_SIZE
        buffer = kwargs.pop("max_buffer_size", None) or DEFAULT_MAX_BUFFER_SIZE
        if limit >= buffer:
            raise ValueError("max_header_size must be below max_buffer_size")
        kwargs.update(max_header_size=buffer, max_buffer_size=buffer)
        super().initialize(*args, **kwargs)
        # The wait for the head keeps the header timeout; Tornado's own read, which that
        # wait always satisfies from the buffer, needs none.
        self._head = HeadRules(limit, self.conn_params.header_timeout, new_id or _new_id)
        self.conn_params.header_timeout = None

    def handle_stream(self, stream: iostream.IOStream, address: tuple[Any, ...]) -> None:
        # As HTTPServer.handle_stream, with the relay's server connection.
        context = _HTTPRequestContext(stream, address, self.protocol, self.trusted_downstream)
        conn = RelayServerConnection(stream, self.conn_params, context, self._head)
        self._connections.add(conn)
        conn.start_serving(self)
