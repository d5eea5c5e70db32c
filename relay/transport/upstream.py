"""Streaming POSTs to the upstream, with our own idle timer and a way to abort.

An idle :class:`Deadline` renewed by every received byte ends a silent upstream with a
504 (a whole-request timeout would be wrong for a stream that may legitimately run for
many minutes). The caller consumes the decoded events as one linear loop, ``async for
item in exchange.events()``: each step reads the upstream once
(:class:`relay.transport.upstream_client.Response`), in the caller's own task, decodes
that read's events and yields them, then :data:`BATCH_DONE` (the end of that read). So
the first events are converted and flushed in the loop iteration that read them, and
nothing is read while the consumer handles an event (backpressure); time spent waiting
on the consumer is not upstream silence and never fires the idle deadline (the client's
delivery deadline covers it). Whatever the consumer raises while handling an event
propagates from its own loop; leaving the loop early closes the connection.

Three dialects (:class:`Dialect`) share those guards, the size limits and the HTTP error
mapping: the Responses event stream; a Chat Completions stream (``data:`` chunks ending
with ``data: [DONE]``, an ``{"error": ...}`` frame ending it as a failure); and one Chat
Completions JSON answer, buffered within ``RELAY_MAX_RESPONSE_BYTES`` and delivered once
whole.

Connections are kept alive (:mod:`relay.transport.pool`). An exchange is over for its
caller as soon as the terminal event is delivered; the end of the body (normally just the
chunked terminator, most often read with the terminal event itself) is then read in the
background, within ``drain_timeout_s``, so that the connection can serve the next request.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from contextlib import aclosing
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

from tornado import httputil
from tornado.iostream import IOStream, StreamClosedError, UnsatisfiableReadError

from relay.clock import Clock, Deadline
from relay.core.responses_events import TERMINAL_EVENTS
from relay.errors import (
    InternalSignal,
    UpstreamError,
    UpstreamHTTPError,
    UpstreamProtocolError,
    UpstreamReportedError,
    UpstreamTimeout,
)
from relay.settings.crashpoints import crash_point
from relay.transport.pool import ConnectionPool
from relay.transport.sse import (
    SSEEvent,
    SSEParser,
    decode_chat_event,
    decode_event,
)
from relay.transport.upstream_client import Response, Target, UpstreamClient

T = TypeVar("T")
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

# A read whose bytes are already buffered completes without a loop turn: an upstream
# that always has the next read ready would hold the loop, so every this many bytes
# handled, the exchange gives the loop one turn (the other connections are served).
YIELD_EVERY_BYTES: Final = 65536
# Failures of a read that are the connection's, not the relay's.
_TRANSPORT_ERRORS: Final = (
    OSError,
    StreamClosedError,
    UnsatisfiableReadError,
    httputil.HTTPInputError,
    TimeoutError,
)


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


def make_http_client(clock: Clock, pool: ConnectionPool | None = None) -> UpstreamClient:
    """The upstream client, keeping connections alive in ``pool`` (default: a new one)."""
    return UpstreamClient(clock, pool)


def origin_of(url: str) -> str:
    """Scheme, host and port: what an error or a log line may say of a URL (never the
    ``user:password`` an OPENAI_BASE_URL may carry)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port is not None else "")


# Background reads of bodies past their terminal event (a task must be referenced).
_DRAINING: set[asyncio.Task[None]] = set()


@dataclass(eq=False)  # identity semantics: live exchanges are kept in a set
class UpstreamExchange:
    """One streamed call: :meth:`events` yields the decoded events until a terminal one."""

    client: UpstreamClient
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
    _opening: asyncio.Future[IOStream] | None = None  # dialing a new connection
    _stream: IOStream | None = None  # the request's connection, until the head is in
    _response: Response | None = None
    _idle: Deadline | None = None
    _delivering: bool = False  # a read's items handed over, not all taken
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
        with ``contextlib.aclosing``: leaving early closes the connection."""
        if self._abort_reason is not None:
            raise self._abort_reason
        parser = SSEParser(max_event_bytes=self.limits.max_sse_event_bytes)
        self._idle = Deadline(self.clock, self.limits.idle_timeout_s, self._on_idle)
        ended = False
        try:
            response = self._response = await self._open()
            unyielded = 0  # bytes handled since the last forced turn
            while True:
                pending = response.read()
                data = await self._outcome(pending)
                if data is None:
                    break
                self._idle.renew()
                if not data:
                    continue  # only chunk framing: no body bytes, no events
                for item in self._consume(parser, data):
                    self._delivering = True
                    yield item
                    self._delivering = False
                    self._raise_if_aborted()
                self._delivering = False
                if self.terminal_event is not None:
                    # Anything after it is ignored; the body's end drains in the background.
                    ended = True
                    self._drain(response)
                    return
                self._idle.renew()  # upstream silence counts from here, not from the read
                unyielded += len(data)
                if unyielded >= YIELD_EVERY_BYTES:  # after this read's events are out
                    unyielded = 0
                    await asyncio.sleep(0)
                    self._raise_if_aborted()
            self._idle.stop()
            for item in self._after_body(parser):
                yield item
            ended = True
        finally:
            self._delivering = False
            self._idle.stop()
            if not ended:
                self._close()  # the consumer left, or a failure: read no more

    async def _open(self) -> Response:
        """Send the request; the answer's head is in (status and content type set). A
        kept-alive connection needs no await before the write; only dialing runs as a
        task of its own, which an abort cancels."""
        client = self.client
        try:
            target = Target.of(self.url)
        except ValueError:
            raise UpstreamError(
                f"the upstream URL {origin_of(self.url)} is not http(s); {self.reach_hint}"
            ) from None
        stream = client.checkout(target)
        if stream is None:
            self._opening = asyncio.ensure_future(
                client.connect(target, self.limits.connect_timeout_s)
            )
            try:
                stream = await self._outcome(self._opening, opening=True)
            finally:
                self._opening = None
        self._stream = stream  # an abort closes it: the head's read fails
        response = await self._outcome(client.send(stream, target, "POST", self.headers, self.body))
        self._stream = None
        self.status = response.code
        crash_point("after_upstream_headers")
        self.content_type = response.headers.get("Content-Type", "").strip().lower()
        return response

    async def _outcome(self, pending: Awaitable[T], *, opening: bool = False) -> T:
        """What ``pending`` (the request or one read) gave, its failure translated: an
        abort's reason wins over the closed connection it caused."""
        try:
            result = await pending
        except asyncio.CancelledError:
            if self._abort_reason is not None:
                raise self._abort_reason from None
            raise
        except _TRANSPORT_ERRORS as exc:
            if self._abort_reason is not None:
                raise self._abort_reason from None
            # Transport faults: name the phase and kind, never echo raw exception text.
            raise self._transport_error(exc) from None
        if self._abort_reason is not None:
            if opening and isinstance(result, IOStream):
                result.close()  # dialed while the abort came: never used
            raise self._abort_reason
        return result

    def _raise_if_aborted(self) -> None:
        if self._abort_reason is not None:
            raise self._abort_reason

    def _close(self) -> None:
        if self._opening is not None and not self._opening.done():
            self._opening.cancel()
        if self._stream is not None:
            self._stream.close()
        if self._response is not None:
            self._response.close()

    def _drain(self, response: Response) -> None:
        """The terminal event is delivered: let the rest of the body arrive in the background
        (the connection is then reused) or, past ``drain_timeout_s``, close it. However the
        body ends no longer matters: its outcome is retrieved, never raised."""
        if response.ended:
            return
        limit = Deadline(self.clock, self.limits.drain_timeout_s, response.close)
        task = asyncio.ensure_future(_read_to_end(response))
        _DRAINING.add(task)

        def ended(done: asyncio.Task[None]) -> None:
            _DRAINING.discard(done)
            limit.stop()

        task.add_done_callback(ended)

    def abort(self, exc: BaseException) -> None:
        """End the exchange with ``exc`` (raised from :meth:`events`); later input is
        ignored."""
        if self._stopped:
            return
        self._stopped = True
        self._abort_reason = exc
        if self.terminal_event is None:
            self._close()  # a pending read (or the request) fails: events() raises exc

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

    def _consume(self, parser: SSEParser, chunk: bytes) -> Iterator[UpstreamItem]:
        """Decode one network read: its events, then BATCH_DONE (nothing after the
        terminal event, nothing for an error body or a JSON answer)."""
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
        handed = False
        for event in parser.feed(chunk):
            decoded = self._decode(event)
            if decoded is not None:
                handed = True
                yield decoded
            if self.terminal_event is not None:
                return  # anything after it in this read is ignored
        if handed:
            yield BATCH_DONE

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


async def _read_to_end(response: Response) -> None:
    """Read a body nobody consumes to its end (the connection then goes back to the pool);
    however it ends, its outcome is retrieved, never raised."""
    try:
        while await response.read() is not None:
            pass
    except (*_TRANSPORT_ERRORS, asyncio.CancelledError):
        response.close()


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


def _kind(exc: BaseException) -> str:
    if isinstance(exc, (httputil.HTTPInputError, UnsatisfiableReadError)):
        return "malformed HTTP framing"  # a bad head or chunked framing: never quoted
    if isinstance(exc, StreamClosedError):
        if exc.real_error is None:
            return "connection closed"
        exc = exc.real_error
    if isinstance(exc, ConnectionResetError):
        return "connection reset"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError) or "Timeout" in type(exc).__name__:
        return "connect timeout"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return type(exc).__name__
