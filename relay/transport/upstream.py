"""Streaming POSTs to the upstream, with our own idle timer and a way to abort.

Tornado's ``request_timeout`` covers the whole request, which is wrong for a stream that
may legitimately run for many minutes, so it is off; instead an idle :class:`Deadline`
renewed by every received byte ends a silent upstream with a 504. The caller consumes the
decoded events as one linear loop, ``async for item in exchange.events()``: Tornado's
streaming callback decodes each network read, hands its events over (then
:data:`BATCH_DONE`, the end of that read) and waits until the consumer has taken them all
before it returns, so a slow downstream slows our reads of the upstream (backpressure);
time spent waiting on the consumer is not upstream silence and never fires the idle
deadline (the client's delivery deadline covers it). Whatever the consumer raises while
handling an event propagates from its own loop; leaving the loop early aborts the
exchange.

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
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
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


class _BatchDone:
    """The type of :data:`BATCH_DONE`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "BATCH_DONE"


# Yielded by events() after the events of one network read (none after the terminal
# event): a consumer that streams flushes here, once per read rather than per event.
BATCH_DONE: Final = _BatchDone()
UpstreamEvent = tuple[str, dict[str, Any]]
UpstreamItem = UpstreamEvent | _BatchDone

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
    """One streamed call: :meth:`events` yields the decoded events until a terminal one."""

    client: SimpleAsyncHTTPClient
    clock: Clock
    limits: UpstreamLimits
    url: str
    headers: dict[str, str]
    body: bytes
    sink: EventSink | None = None  # run(): each event is delivered here
    buffered: bool = False  # JSON-mode client: the whole stream is held, so cap its size
    # run(): awaited after the events of one network read were delivered (BATCH_DONE).
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
    # The handoff: what the streaming callback decoded and the consumer has not taken.
    _items: deque[UpstreamItem] = field(default_factory=deque)
    _arrived: asyncio.Future[None] | None = None  # the consumer waits for items
    _taken: asyncio.Future[None] | None = None  # the callback waits for the consumer
    _delivering: bool = False  # items handed over, not all taken (maybe waiting on the client)
    _stopped: bool = False
    _abort_reason: BaseException | None = None

    async def run(self) -> None:
        """Deliver every event to ``sink`` and each read's end to ``batch_done``."""
        assert self.sink is not None, "run() delivers to a sink"
        async with aclosing(self.events()) as items:
            async for item in items:
                if isinstance(item, _BatchDone):
                    if self.batch_done is not None:
                        await self.batch_done()
                else:
                    await self.sink(*item)

    async def events(self) -> AsyncGenerator[UpstreamItem, None]:
        """The upstream's events, each ``(event_type, data)``, and :data:`BATCH_DONE` at
        the end of each network read; it ends after the terminal event. Raises what ended
        the exchange: an upstream error, a timeout, :meth:`abort`'s reason. Consume it
        with ``contextlib.aclosing``: leaving early aborts the exchange."""
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
        loop = asyncio.get_running_loop()
        fetch = self.client.fetch(self._request, raise_error=False)
        ended = False
        try:
            while True:
                while self._items:
                    yield self._items.popleft()
                if self.terminal_event is not None:
                    # Anything after it is ignored; the body's end drains in the background.
                    ended = True
                    self._drain(fetch)
                    return
                self._release()  # every item taken: the callback may read on
                if fetch.done():
                    break
                self._arrived = loop.create_future()
                await asyncio.wait((fetch, self._arrived), return_when=asyncio.FIRST_COMPLETED)
            self._idle.stop()
            try:
                fetch.result()
            except (RelayError, ClientGone):
                raise
            except Exception as exc:
                # Transport faults: name the phase and kind, never echo raw exception text.
                raise self._transport_error(exc) from None
            for item in self._after_body(parser):
                yield item
            ended = True
        finally:
            self._idle.stop()
            if not ended and not fetch.done():
                self.abort(StreamFinished())  # the consumer left: read no more
            self._release()
            fetch.add_done_callback(_retrieved)

    def _drain(self, fetch: asyncio.Future[Any]) -> None:
        """The terminal event is delivered: let the rest of the body arrive in the background
        (the connection is then reused) or, past ``drain_timeout_s``, close it. However the
        body ends no longer matters: its outcome is retrieved, never raised."""
        limit = Deadline(
            self.clock, self.limits.drain_timeout_s, lambda: self.abort(StreamFinished())
        )

        def ended(done: asyncio.Future[Any]) -> None:
            limit.stop()
            _retrieved(done)

        fetch.add_done_callback(ended)

    def abort(self, exc: BaseException) -> None:
        """End the exchange with ``exc`` (raised from :meth:`events`); later input is
        ignored."""
        if self._stopped:
            return
        self._stopped = True
        self._abort_reason = exc
        self._release()  # a callback waiting on the consumer returns: nothing more is read
        if self._request is None:
            return  # events() has not started: it raises the reason at once
        if self._request.connection is not None:
            self._request.connection.abort(exc)
        else:
            self._request.pending_abort = exc

    def _release(self) -> None:
        """Every item handed over was taken: the callback may read on, and from now on
        upstream silence counts again (not only once the callback has resumed)."""
        if self._taken is not None and not self._taken.done():
            self._taken.set_result(None)
        if self._delivering:
            self._delivering = False
            if self._idle is not None:
                self._idle.renew()

    def _hand_over(self, item: UpstreamItem) -> None:
        self._items.append(item)
        if self._arrived is not None and not self._arrived.done():
            self._arrived.set_result(None)

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
        # Tornado logs (rather than propagates) exceptions raised here, so an outcome that
        # ends the exchange is delivered by aborting the connection with it (events()
        # raises it once the items handed over before it were taken).
        if self._stopped or self.terminal_event is not None:
            return  # after the terminal event, only the body's end matters (see _drain)
        assert self._idle is not None
        try:
            terminal = self._consume(parser, chunk)
        except BaseException as exc:
            self.abort(exc)
            return
        if not self._items:
            return  # nothing to hand over: an error body, a JSON answer, a partial event
        if terminal:
            # Nothing more is read for the consumer: the body's end (see _drain) need not
            # wait for it, and upstream silence no longer matters.
            self._idle.stop()
            return
        self._delivering = True
        self._taken = asyncio.get_running_loop().create_future()
        try:
            await self._taken  # backpressure: read on once the consumer took every item
        finally:
            self._delivering = False
            self._idle.renew()  # upstream silence counts again from here

    def _consume(self, parser: SSEParser, chunk: bytes) -> bool:
        """Decode one network read and hand its events over; whether the terminal event
        was among them."""
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
            return False
        if self.dialect is Dialect.CHAT_JSON:
            self._buffer_json(chunk)
            return False
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
        for event in parser.feed(chunk):
            decoded = self._decode(event)
            if decoded is not None:
                self._hand_over(decoded)
            if self.terminal_event is not None:
                return True  # anything after it in this read is ignored
        self._hand_over(BATCH_DONE)
        return False

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

    def _decode(self, event: SSEEvent) -> UpstreamEvent | None:
        """One SSE event as the consumer sees it (``None``: a chat stream's end)."""
        if self.dialect is not Dialect.RESPONSES:
            return self._decode_chat(event)
        event_type, data = decode_event(event)
        if event_type == "[DONE]":
            raise UpstreamProtocolError("upstream stream sent [DONE] before a terminal event")
        if event_type in TERMINAL_EVENTS:
            self.terminal_event = event_type
        return event_type, data

    def _decode_chat(self, event: SSEEvent) -> UpstreamEvent | None:
        payload = decode_chat_event(event)
        if payload is None:
            self.terminal_event = CHAT_DONE
            return None
        if "error" in payload and not payload.get("choices"):
            raise UpstreamReportedError(payload)
        return CHAT_CHUNK, payload

    def _decode_json(self) -> UpstreamEvent:
        try:
            payload = json.loads(self._json_body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise UpstreamProtocolError("upstream JSON answer is not valid JSON") from None
        if not isinstance(payload, dict):
            raise UpstreamProtocolError("upstream JSON answer is not a JSON object")
        if "error" in payload and not payload.get("choices"):
            raise UpstreamReportedError(payload)
        self.terminal_event = CHAT_COMPLETION
        return CHAT_COMPLETION, payload

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

    def _after_body(self, parser: SSEParser) -> list[UpstreamItem]:
        """The body ended without a terminal event in its reads: what its end still holds
        (a JSON answer, the parser's last event), else the error it is."""
        if self.status is None:
            raise UpstreamError(f"the upstream at {origin_of(self.url)} sent no answer")
        if not self._is_success():
            raise _http_error(self.status, bytes(self._error_body))
        if self.dialect is Dialect.CHAT_JSON:
            return [self._decode_json()]
        items: list[UpstreamItem] = []
        for event in parser.close():
            decoded = self._decode(event)
            if decoded is not None:
                items.append(decoded)
            if self.terminal_event is not None:
                return items
        if self.dialect is Dialect.CHAT_STREAM:
            raise UpstreamProtocolError("the upstream chat stream ended without data: [DONE]")
        raise UpstreamProtocolError(
            "the upstream stream ended without a terminal event "
            "(response.completed, response.incomplete or response.failed)"
        )


def _retrieved(done: asyncio.Future[Any]) -> None:
    """A fetch nobody awaits any more: its outcome is retrieved, so never logged as lost."""
    if not done.cancelled():
        done.exception()


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
