"""What every model-call handler shares: the body read within limits, and one upstream
exchange that a client disconnect or a shutdown can abort."""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, TypeVar

from tornado.ioloop import IOLoop
from tornado.iostream import IOStream
from tornado.web import stream_request_body

from relay.core.json_bytes import encode_body
from relay.core.replay_header import HEADER as REPLAY_HEADER
from relay.core.token_usage import Usage
from relay.errors import PayloadTooLarge
from relay.handlers.base import BaseHandler
from relay.http.request_body import check_content_encoding, parse_json_object
from relay.observability.body_log import RequestBodies
from relay.ops.hooks import answer_finished
from relay.ops.metrics import CLIENT_GONE
from relay.settings.crashpoints import crash_point
from relay.settings.providers import Provider
from relay.transport.downstream import Downstream
from relay.transport.upstream import ClientGone, Dialect, UpstreamExchange

# Bodies larger than this are parsed off the event loop (measured: 1 MiB of JSON parses in
# under 10 ms; 50 MB of small objects in 1 to 2 s).
PARSE_OFF_LOOP_BYTES: Final = 1024 * 1024
T = TypeVar("T")


@stream_request_body
class RelayingHandler(BaseHandler):
    _sse_started = False  # start_sse has run
    # A class default: on_connection_close also runs when prepare() refused the request.
    _exchange: UpstreamExchange | None = None
    _bodies: RequestBodies | None = None  # LOG_BODIES=1: this request's artifacts
    _large = False  # the body is over PARSE_OFF_LOOP_BYTES (see off_loop)
    _large_done_once = False  # _COLLECTION was told that this large request ended
    # Token accounting (relay.ops.token_stats), read once the request ends: the body's
    # shape (set by a handler that relays a generation), X-Relay-Replay as last set, the
    # upstream model and the final event's usage (set by the shell).
    body_shape: str | None = None
    replay_outcome: str | None = None
    upstream_model: Any = None
    answer_usage: Usage | None = None

    def set_header(self, name: str, value: Any) -> None:
        if name == REPLAY_HEADER:
            self.replay_outcome = str(value)
        super().set_header(name, value)

    def prepare(self) -> None:
        self._body = bytearray()
        if self.runtime.body_log is not None:
            self._bodies = self.runtime.body_log.for_request(self.request_id)
        super().prepare()
        # From the head alone, before any of the body is read.
        check_content_encoding(self.request.headers.get("Content-Encoding"))
        limit = self.runtime.config.max_request_bytes
        declared = self.request.headers.get("Content-Length")
        if declared is not None and _declares_more(declared, limit):
            raise PayloadTooLarge(_too_large(limit))
        # Chunked uploads are limited by data_received alone. Tornado's own body limit
        # (left at the server's "unlimited") must not fire first: Tornado 6.6 coalesces
        # small chunks and would answer a bare 400 before we see the data. Once we have
        # answered 413, Tornado drops the rest of the body and closes the connection.

    def data_received(self, chunk: bytes) -> None:
        if self.response_state.finished:
            return
        if len(self._body) + len(chunk) > self.runtime.config.max_request_bytes:
            self.send_relay_error(
                PayloadTooLarge(_too_large(self.runtime.config.max_request_bytes))
            )
            return
        self._body += chunk

    def on_finish(self) -> None:
        self._large_done()
        if self.body_shape is not None and self.upstream_model is not None:
            answer_finished(
                self.runtime, self.body_shape, self.upstream_model, self.replay_outcome,
                self.answer_usage,
            )  # fmt: skip
        super().on_finish()

    def _large_done(self) -> None:
        if self._large and not self._large_done_once:
            self._large_done_once = True
            _COLLECTION.request_ended()

    def on_connection_close(self) -> None:
        self._large_done()
        self.count_request(CLIENT_GONE)
        if self._exchange is not None:
            self._exchange.abort(ClientGone())

    def downstream(self, keepalive_frame: bytes | None = None) -> Downstream:
        """The client side of this request; SSE keepalives only with a keepalive frame."""
        config = self.runtime.config
        return Downstream(
            self,
            self.runtime.clock,
            write_timeout_s=config.delivery_timeout_ms / 1000,
            keepalive_s=config.sse_keepalive_ms / 1000 if keepalive_frame else 0,
            keepalive_frame=keepalive_frame or b"",
            tap=self._bodies.writer("client-response") if self._bodies else None,
        )

    async def send_json(self, answer: Mapping[str, Any]) -> None:
        """Send one whole JSON answer within the delivery deadline; raises ``ClientGone``."""
        payload = json.dumps(answer, ensure_ascii=False).encode("utf-8")
        down = self.downstream()
        self.set_header("Content-Type", "application/json")
        self.set_header("Content-Length", str(len(payload)))
        down.start_delivery(self.runtime.config.delivery_timeout_ms / 1000)
        down.queue(payload)
        await down.drain()

    def start_sse(self, down: Downstream) -> None:
        """Make this response an event stream. Callers call it before queuing frames;
        only the first call does anything (the headers are written with the first flush,
        so until then nothing else says the stream has started)."""
        if self._sse_started:
            return
        self._sse_started = True
        self.set_header("Content-Type", "text/event-stream; charset=utf-8")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")
        # Each flush leaves at once: without TCP_NODELAY, on a kept-alive client connection
        # Nagle's algorithm holds a small frame back until the client has ACKed the one
        # before, which a delayed ACK postpones (Tornado restores it after the response).
        stream = getattr(self.request.connection, "stream", None)
        if isinstance(stream, IOStream):
            stream.set_nodelay(True)
        down.start_keepalive()

    async def json_body(self) -> dict[str, Any]:
        """The request body as a JSON object (its buffer is released). One over
        :data:`PARSE_OFF_LOOP_BYTES` is parsed on a worker thread, piecewise (its C parse
        would hold the GIL throughout), so that the other connections are served."""
        raw, self._body = self._body, bytearray()  # not copied: no one else holds it
        if self._bodies is not None:
            self._bodies.write("client-request.json", bytes(raw))
        content_type = self.request.headers.get("Content-Type")
        if len(raw) <= PARSE_OFF_LOOP_BYTES:
            return parse_json_object(raw, content_type)
        self._large = True
        _COLLECTION.request_started()
        return await self.off_loop(parse_json_object, raw, content_type, piecewise=True)

    async def off_loop(self, pure: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``pure(*args, **kwargs)``: on a worker thread when this request's body is large
        (:meth:`json_body`), so that its work on that body does not stall the other
        connections; else here. ``pure`` touches nothing but its arguments."""
        call = functools.partial(pure, *args, **kwargs)
        if not self._large:
            return call()
        return await IOLoop.current().run_in_executor(None, _COLLECTION.run, call)

    async def exchange_for(
        self, upstream_body: dict[str, Any], *, buffered: bool, provider: Provider | None = None
    ) -> UpstreamExchange:
        """A Responses exchange with ``provider`` (default: the built-in upstream)."""
        # Always streamed upstream, so the idle timer and capture work alike in both modes.
        upstream_body["stream"] = True
        body = await self.off_loop(encode_body, upstream_body, piecewise=self._large)
        return self.open_exchange(
            provider or self.runtime.builtin_provider,
            body,
            buffered=buffered,
            dialect=Dialect.RESPONSES,
        )

    def open_exchange(
        self, provider: Provider, body: bytes, *, buffered: bool, dialect: Dialect
    ) -> UpstreamExchange:
        """An exchange posting ``body`` to ``provider`` in ``dialect``; this handler's
        disconnect aborts it."""
        if self._bodies is not None:
            self._bodies.write("upstream-request.json", body)
        exchange = UpstreamExchange(
            client=self.runtime.http_client,
            clock=self.runtime.clock,
            limits=self.runtime.upstream_limits,
            url=provider.url,
            headers=self.runtime.headers_for(provider, json_answer=dialect is Dialect.CHAT_JSON),
            body=body,
            buffered=buffered,
            dialect=dialect,
            reach_hint=self.runtime.reach_hint(provider),
            tap=self._bodies.writer("upstream-response") if self._bodies else None,
        )
        self._exchange = exchange
        return exchange

    @contextlib.contextmanager
    def exchanging(self, exchange: UpstreamExchange) -> Iterator[UpstreamExchange]:
        """While its events are consumed, ``exchange`` is live: a shutdown aborts it."""
        self.runtime.active.add(exchange)
        crash_point("before_upstream_send")
        try:
            yield exchange
        finally:
            self.runtime.active.discard(exchange)
            self._exchange = None


class _Collection:
    """Keeps the cyclic garbage collector away from a large body's objects.

    A collection runs in whichever thread allocates and holds the GIL throughout; the
    millions of objects a large body parses into make the collections during its parse,
    and the first one after it, long enough to stall the event loop by tenths of a second
    each. So the collector is off while such work runs on a worker thread, and what was
    allocated is then *frozen* (``gc.freeze``, constant time: moved out of the
    collector's sight, still freed by reference counting). Parsed JSON and its
    translation hold no reference cycles, so nothing of theirs waits on the collector.
    Once no large request is in flight, everything is unfrozen (constant time too), so
    that any cyclic garbage frozen along is collected as usual.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._working = 0  # calls in run()
        self._requests = 0  # large requests not finished

    def run(self, call: Callable[[], T]) -> T:
        with self._lock:
            self._working += 1
            gc.disable()
        try:
            return call()
        finally:
            with self._lock:
                self._working -= 1
                if not self._working:
                    gc.freeze()
                    gc.enable()

    def request_started(self) -> None:
        with self._lock:
            self._requests += 1

    def request_ended(self) -> None:
        with self._lock:
            self._requests -= 1
            if not self._requests and not self._working:
                gc.unfreeze()


_COLLECTION = _Collection()


def _declares_more(declared: str, limit: int) -> bool:
    """Whether a Content-Length states more than ``limit`` bytes. Only plain ASCII digits
    count (Tornado refuses anything else with a 400), and a long one is compared by its
    length, not converted (int() refuses over 4300 digits)."""
    digits = declared.strip().lstrip("0")
    if not (digits.isascii() and digits.isdigit()):
        return False
    return len(digits) > len(str(limit)) or int(digits) > limit


def _too_large(limit: int) -> str:
    return (
        f"request body exceeds RELAY_MAX_REQUEST_BYTES ({limit} bytes); "
        "shorten the conversation or raise the limit"
    )
