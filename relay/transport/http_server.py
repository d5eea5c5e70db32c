"""The relay's HTTP/1.1 server, on Tornado's public surface only.

Tornado's own ``HTTPServer`` answers a malformed request line, header or body framing with
a bare ``400 Bad Request`` (no body), closes without any answer when a head exceeds
``max_header_size`` or a chunk size line exceeds 64 bytes, and offers no hook for any of
it but private methods. So the relay runs its own connection
(:mod:`relay.transport.http_connection`, each answer an
:class:`~relay.transport.http_exchange.Exchange`), written against
``tornado.iostream.IOStream``, ``tornado.httputil``'s parsers and its ``HTTPConnection`` /
``HTTPServerConnectionDelegate`` interfaces, and its own accept loop on ``IOLoop``
handlers (here): nothing a Tornado release may change without notice (its underscore
names; a test scans ``relay/`` for them).

The server (:class:`RelayHTTPServer`) caps the connections it serves and pauses accepting,
with back-off, when ``accept`` fails (out of file descriptors).

Less work than Tornado's connection per request: one regex read for the head, no
delegate wrappers, one timer per deadline instead of a wrapping future, no Nagle toggles.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
from collections.abc import Callable, Iterable
from typing import Any, Final

from tornado import httputil, iostream
from tornado.ioloop import IOLoop

from relay.clock import Clock, SystemClock
from relay.errors import TooManyConnections
from relay.observability import log
from relay.transport.http_connection import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_BUFFER_SIZE,
    DEFAULT_MAX_HEADER_SIZE,
    HeadRules,
    ServerConnection,
    random_id,
)
from relay.transport.http_exchange import RequestContext
from relay.transport.protocol_errors import rejection_bytes

ACCEPT_BACKOFF_MIN: Final = 0.01  # seconds
ACCEPT_BACKOFF_MAX: Final = 1.0
ACCEPT_BATCH: Final = 128  # accepts per readable event, as Tornado (its listen backlog)
LOG_EVERY_S: Final = 60.0  # at most one line this often for connections refused or paused


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
            new_id or random_id,
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
