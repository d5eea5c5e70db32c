"""Streaming POSTs to the upstream, with our own idle timer and a way to abort.

Tornado's ``request_timeout`` covers the whole request, which is wrong for a stream that
may legitimately run for many minutes, so it is off; instead an idle :class:`Deadline`
renewed by every received byte ends a silent upstream with a 504. The streaming callback
is a coroutine, so a slow downstream slows our reads of the upstream (backpressure); time
spent waiting on the client is not upstream silence and never fires the idle deadline
(the client's delivery deadline covers it).

Three dialects (:class:`Dialect`) share those guards, the size limits and the HTTP error
mapping: the Responses event stream; a Chat Completions stream (``data:`` chunks ending
with ``data: [DONE]``, an ``{"error": ...}`` frame ending it as a failure); and one Chat
Completions JSON answer, buffered within ``RELAY_MAX_RESPONSE_BYTES`` and delivered once
whole.

Connections are kept alive (:mod:`relay.transport.pool`). An exchange is over for its
caller as soon as the terminal event is delivered; the end of the body (normally just the
chunked terminator, already on its way) is then read in the background, within
``drain_timeout_s``, so that the connection can serve the next request.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final
from urllib.parse import urlsplit

from tornado import httputil
from tornado.http1connection import HTTP1Connection
from tornado.httpclient import HTTPRequest
from tornado.iostream import IOStream
from tornado.netutil import DefaultLoopResolver
from tornado.simple_httpclient import HTTPStreamClosedError, SimpleAsyncHTTPClient, _HTTPConnection

from relay.clock import Clock, Deadline
from relay.core.responses_events import TERMINAL_EVENTS
from relay.errors import (
    InternalSignal,
    RelayError,
    UpstreamError,
    UpstreamHTTPError,
    UpstreamProtocolError,
    UpstreamReportedError,
    UpstreamTimeout,
)
from relay.settings.crashpoints import crash_point
from relay.transport.chunked import BulkChunkedHTTP1Connection
from relay.transport.pool import ConnectionPool, PooledTCPClient
from relay.transport.sse import (
    SSEEvent,
    SSEParser,
    decode_chat_event,
    decode_event,
)

EventSink = Callable[[str, dict[str, Any]], Awaitable[None]]
BatchDone = Callable[[], Awaitable[None]]

# What a Chat exchange hands its sink: one event type per dialect.
CHAT_CHUNK = "chat.completion.chunk"
CHAT_COMPLETION = "chat.completion"
CHAT_DONE = "[DONE]"


class Dialect(StrEnum):
    RESPONSES = "responses"  # Responses SSE: typed events, ends with response.completed & co
    CHAT_STREAM = "chat_stream"  # Chat SSE: chunks, ends with data: [DONE]
    CHAT_JSON = "chat_json"  # one chat.completion JSON body


class StreamFinished(InternalSignal):
    """Ends a connection whose body did not end cleanly after the terminal event."""


class ClientGone(InternalSignal):
    """The downstream client disconnected; the upstream request is abandoned."""


@dataclass(frozen=True)
class UpstreamLimits:
    idle_timeout_s: float
    max_response_bytes: int
    max_sse_event_bytes: int
    connect_timeout_s: float = 30.0
    # After the terminal event: how long the rest of the body may take before the
    # connection is closed instead of kept (see the module docstring).
    drain_timeout_s: float = 2.0


# Body bytes handed to the event parser at a time (see _AbortableConnection).
READ_CHUNK_BYTES: Final = 4096


class _AbortableRequest(HTTPRequest):
    """Carries a back-reference to its live connection so the relay can abort it."""

    connection: _AbortableConnection | None = None
    pending_abort: BaseException | None = None  # aborted before a connection existed


class ResetSafeConnection(_HTTPConnection):
    """Tornado's client connection, completing a fetch that a connection reset ends."""

    def on_connection_close(self) -> None:
        # Tornado re-raises a reset's socket error from this callback without completing
        # the fetch, which leaves the request hanging; complete it with that error instead.
        if self.final_callback is not None:
            error = self.stream.error or HTTPStreamClosedError("Connection closed")
            self._handle_exception(type(error), error, None)


class _AbortableConnection(ResetSafeConnection):
    def __init__(self, client: Any, request: Any, *args: Any) -> None:
        # ``request`` is Tornado's defaults proxy; the real request sits behind it.
        real = getattr(request, "request", request)
        super().__init__(client, request, *args)
        self._keep_alive = False  # the answer allows reuse (HTTP/1.1, no Connection: close)
        if isinstance(real, _AbortableRequest):
            real.connection = self
            if real.pending_abort is not None:
                self.abort(real.pending_abort)

    def abort(self, exc: BaseException) -> None:
        """Finish the fetch with ``exc`` and close the socket."""
        self._handle_exception(type(exc), exc, None)

    def _create_connection(self, stream: IOStream) -> HTTP1Connection:
        made = super()._create_connection(stream)
        # The same connection, reading a chunked body in bulk (relay.transport.chunked).
        connection = BulkChunkedHTTP1Connection(stream, True, made.params, made.context)
        # Tornado hands the body over in pieces of up to chunk_size, coalescing whatever
        # has arrived until then: at its 64 KiB default a fast upstream's first events
        # wait for a whole burst to be read and parsed. Small pieces bound that latency.
        connection.params.chunk_size = READ_CHUNK_BYTES
        return connection

    async def headers_received(
        self,
        first_line: httputil.ResponseStartLine | httputil.RequestStartLine,
        headers: httputil.HTTPHeaders,
    ) -> None:
        tokens = {t.strip().lower() for t in headers.get("Connection", "").split(",")}
        self._keep_alive = first_line.version == "HTTP/1.1" and "close" not in tokens
        await super().headers_received(first_line, headers)

    def _on_end_request(self) -> None:
        # Only reached once the whole answer was read: the connection is at a request
        # boundary, and goes back to the pool if the answer allows it.
        if self._keep_alive and isinstance(self.tcp_client, PooledTCPClient):
            self.tcp_client.pool.checkin(self.connection.detach())
        else:
            self.stream.close()


class _Client(SimpleAsyncHTTPClient):
    def _connection_class(self) -> type:
        return _AbortableConnection

    def close(self) -> None:
        # Answers still draining (see UpstreamExchange) end with the client.
        for request, _ in list(self.active.values()):
            real = getattr(request, "request", request)
            if isinstance(real, _AbortableRequest) and real.connection is not None:
                real.connection.abort(HTTPStreamClosedError("the relay is shutting down"))
        super().close()


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


def make_http_client(clock: Clock, pool: ConnectionPool | None = None) -> SimpleAsyncHTTPClient:
    """The upstream client, keeping connections alive in ``pool`` (default: a new one)."""
    # A private instance: the shared one has a 100 MB body cap that would cut long streams;
    # our own per-event and per-response limits apply instead.
    client = _Client(
        force_instance=True, max_clients=1000, max_body_size=2**62, resolver=_LiteralResolver()
    )
    client.tcp_client = PooledTCPClient(client.resolver, pool or ConnectionPool(clock))
    return client


def origin_of(url: str) -> str:
    """Scheme, host and port: what an error or a log line may say of a URL (never the
    ``user:password`` an OPENAI_BASE_URL may carry)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port is not None else "")


@dataclass(eq=False)  # identity semantics: live exchanges are kept in a set
class UpstreamExchange:
    """One streamed call. ``run`` delivers decoded events to ``sink`` until a terminal one."""

    client: SimpleAsyncHTTPClient
    clock: Clock
    limits: UpstreamLimits
    url: str
    headers: dict[str, str]
    body: bytes
    sink: EventSink
    buffered: bool = False  # JSON-mode client: the whole stream is held, so cap its size
    # Awaited after the events of one network read were delivered: the downstream
    # flushes once per read, which keeps backpressure without a flush per event.
    batch_done: BatchDone | None = None
    dialect: Dialect = Dialect.RESPONSES
    # Said when the upstream cannot be reached: which setting holds its address.
    reach_hint: str = "check OPENAI_BASE_URL and the network"
    tap: Callable[[bytes], None] | None = None  # sees every byte read (LOG_BODIES)
    status: int | None = None
    content_type: str = ""
    terminal_event: str | None = None
    bytes_received: int = 0
    _error_body: bytearray = field(default_factory=bytearray)
    _json_body: bytearray = field(default_factory=bytearray)
    _request: _AbortableRequest | None = None
    _idle: Deadline | None = None
    _terminal: asyncio.Future[None] | None = None  # resolved once the terminal event is delivered
    _delivering: bool = False  # handing events to the sink (maybe waiting on the client)
    _stopped: bool = False
    _abort_reason: BaseException | None = None

    async def run(self) -> None:
        if self._abort_reason is not None:
            raise self._abort_reason
        parser = SSEParser(max_event_bytes=self.limits.max_sse_event_bytes)
        self._request = _AbortableRequest(
            self.url,
            method="POST",
            headers={**self.headers, "Connection": "keep-alive"},  # Tornado's default: close
            body=self.body,
            header_callback=self._on_header_line,
            streaming_callback=lambda chunk: self._on_chunk(parser, chunk),
            connect_timeout=self.limits.connect_timeout_s,
            request_timeout=0,
            decompress_response=True,
        )
        self._idle = Deadline(self.clock, self.limits.idle_timeout_s, self._on_idle)
        self._terminal = asyncio.get_running_loop().create_future()
        fetch = self.client.fetch(self._request, raise_error=False)
        try:
            await asyncio.wait((fetch, self._terminal), return_when=asyncio.FIRST_COMPLETED)
            if self._terminal.done():
                self._drain(fetch)
                return
            fetch.result()
        except (RelayError, ClientGone):
            raise
        except Exception as exc:
            # Transport faults: name the phase and kind, never echo raw exception text.
            raise self._transport_error(exc) from None
        finally:
            self._idle.stop()
        await self._after_body(parser)

    def _drain(self, fetch: asyncio.Future[Any]) -> None:
        """The terminal event is delivered: let the rest of the body arrive in the background
        (the connection is then reused) or, past ``drain_timeout_s``, close it. However the
        body ends no longer matters: its outcome is retrieved, never raised."""
        limit = Deadline(
            self.clock, self.limits.drain_timeout_s, lambda: self.abort(StreamFinished())
        )

        def ended(done: asyncio.Future[Any]) -> None:
            limit.stop()
            if not done.cancelled():
                done.exception()

        fetch.add_done_callback(ended)

    def abort(self, exc: BaseException) -> None:
        """End the exchange with ``exc`` (raised from :meth:`run`); later input is ignored."""
        if self._stopped:
            return
        self._stopped = True
        self._abort_reason = exc
        if self._request is None:
            return  # run() has not started: it raises the reason at once
        if self._request.connection is not None:
            self._request.connection.abort(exc)
        else:
            self._request.pending_abort = exc

    def _on_idle(self) -> None:
        if self._delivering:
            # Blocked on a slow client (backpressure): we are not reading the upstream, so
            # its silence means nothing. The client's own delivery deadline bounds this.
            self._idle = Deadline(self.clock, self.limits.idle_timeout_s, self._on_idle)
            return
        self.abort(
            UpstreamTimeout(
                f"the upstream sent nothing for {self.limits.idle_timeout_s:g}s "
                "(RELAY_IDLE_TIMEOUT_MS); the generation was abandoned"
            )
        )

    def _on_header_line(self, line: str) -> None:
        if line.startswith("HTTP/"):
            self.status = httputil.parse_response_start_line(line.strip()).code
            crash_point("after_upstream_headers")
        elif line.lower().startswith("content-type:"):
            self.content_type = line.split(":", 1)[1].strip().lower()

    async def _on_chunk(self, parser: SSEParser, chunk: bytes) -> None:
        # Tornado logs (rather than propagates) exceptions raised here, so every outcome
        # that ends the exchange is delivered by aborting the connection with it.
        if self._stopped or self.terminal_event is not None:
            return  # after the terminal event, only the body's end matters (see _drain)
        try:
            await self._consume(parser, chunk)
        except BaseException as exc:
            self.abort(exc)

    async def _consume(self, parser: SSEParser, chunk: bytes) -> None:
        assert self._idle is not None
        self._idle.renew()
        self.bytes_received += len(chunk)
        if self.tap is not None:
            self.tap(chunk)
        if not self._is_success():
            if len(self._error_body) + len(chunk) > self.limits.max_response_bytes:
                raise UpstreamProtocolError(
                    "upstream error answer exceeds RELAY_MAX_RESPONSE_BYTES "
                    f"({self.limits.max_response_bytes} bytes)"
                )
            self._error_body += chunk
            return
        if self.dialect is Dialect.CHAT_JSON:
            self._buffer_json(chunk)
            return
        if not self.content_type.startswith("text/event-stream"):
            raise UpstreamProtocolError(
                f"upstream answered {self.content_type or 'no content type'} "
                "where an event stream (text/event-stream) was requested"
            )
        if self.buffered and self.bytes_received > self.limits.max_response_bytes:
            raise UpstreamProtocolError(
                "upstream response exceeds RELAY_MAX_RESPONSE_BYTES "
                f"({self.limits.max_response_bytes} bytes)"
            )
        self._delivering = True
        try:
            for event in parser.feed(chunk):
                await self._deliver(event)
                if self.terminal_event is not None:
                    # Anything after it in this read is ignored; run() returns now.
                    if self._terminal is not None and not self._terminal.done():
                        self._terminal.set_result(None)
                    return
            if self.batch_done is not None:
                await self.batch_done()
        finally:
            self._delivering = False
            self._idle.renew()  # upstream silence counts again from here

    def _buffer_json(self, chunk: bytes) -> None:
        media = self.content_type.split(";", 1)[0].strip()
        if media != "application/json" and not media.endswith("+json"):
            raise UpstreamProtocolError(
                f"upstream answered {self.content_type or 'no content type'} "
                "where a JSON answer (application/json) was requested"
            )
        if len(self._json_body) + len(chunk) > self.limits.max_response_bytes:
            raise UpstreamProtocolError(
                "upstream response exceeds RELAY_MAX_RESPONSE_BYTES "
                f"({self.limits.max_response_bytes} bytes)"
            )
        self._json_body += chunk

    async def _deliver(self, event: SSEEvent) -> None:
        if self.dialect is not Dialect.RESPONSES:
            await self._deliver_chat(event)
            return
        event_type, data = decode_event(event)
        if event_type == "[DONE]":
            raise UpstreamProtocolError("upstream stream sent [DONE] before a terminal event")
        if event_type in TERMINAL_EVENTS:
            self.terminal_event = event_type
        await self.sink(event_type, data)

    async def _deliver_chat(self, event: SSEEvent) -> None:
        payload = decode_chat_event(event)
        if payload is None:
            self.terminal_event = CHAT_DONE
            return
        if "error" in payload and not payload.get("choices"):
            raise UpstreamReportedError(payload)
        await self.sink(CHAT_CHUNK, payload)

    async def _deliver_json(self) -> None:
        try:
            payload = json.loads(self._json_body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise UpstreamProtocolError("upstream JSON answer is not valid JSON") from None
        if not isinstance(payload, dict):
            raise UpstreamProtocolError("upstream JSON answer is not a JSON object")
        if "error" in payload and not payload.get("choices"):
            raise UpstreamReportedError(payload)
        self.terminal_event = CHAT_COMPLETION
        await self.sink(CHAT_COMPLETION, payload)

    def _is_success(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def _transport_error(self, exc: Exception) -> UpstreamError:
        if self.status is None:
            return UpstreamError(
                f"could not reach the upstream at {origin_of(self.url)} ({_kind(exc)}); "
                f"{self.reach_hint}"
            )
        if not self._is_success():
            return _http_error(self.status, bytes(self._error_body))
        return UpstreamProtocolError(
            f"the upstream connection broke mid-stream ({_kind(exc)}) before a terminal event"
        )

    async def _after_body(self, parser: SSEParser) -> None:
        if self.status is None:
            raise UpstreamError(f"the upstream at {origin_of(self.url)} sent no answer")
        if not self._is_success():
            raise _http_error(self.status, bytes(self._error_body))
        if self.dialect is Dialect.CHAT_JSON:
            await self._deliver_json()
            return
        for event in parser.close():
            await self._deliver(event)
            if self.terminal_event is not None:
                return
        if self.dialect is Dialect.CHAT_STREAM:
            raise UpstreamProtocolError("the upstream chat stream ended without data: [DONE]")
        raise UpstreamProtocolError(
            "the upstream stream ended without a terminal event "
            "(response.completed, response.incomplete or response.failed)"
        )


def _http_error(status: int, body: bytes) -> UpstreamError:
    try:
        envelope = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        envelope = None
    if isinstance(envelope, dict) and isinstance(envelope.get("error"), dict):
        return UpstreamHTTPError(status, envelope)
    return UpstreamHTTPError(
        status,
        {
            "error": {
                "message": f"upstream answered HTTP {status} without an OpenAI error body",
                "type": "upstream_error",
                "param": None,
                "code": None,
            }
        },
    )


def _kind(exc: Exception) -> str:
    if isinstance(exc, HTTPStreamClosedError):
        return "connection closed"
    if isinstance(exc, ConnectionResetError):
        return "connection reset"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError) or "Timeout" in type(exc).__name__:
        return "connect timeout"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return type(exc).__name__
