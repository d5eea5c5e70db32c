"""Kept-alive upstream connections: a request to the same origin skips TCP and TLS setup.

An answer read to its very end leaves its HTTP/1.1 connection at a request boundary; the
upstream client checks it in here and the next request to that origin checks it out
instead of dialing (and resolving) again. Against api.openai.com that saves the TCP and
TLS handshakes, several round trips, on every request after the first.

A connection is reused only while it is certainly idle and whole:

- it waited at most ``idle_s`` (servers drop idle connections after a minute or more;
  letting go first keeps a request from racing the server's close);
- nothing arrived while it waited: data or an EOF from the server means it is no longer
  at a request boundary, so it is closed, never read (checked again at checkout, on the
  socket itself, because the close may not have been processed yet);
- at most ``max_idle`` wait per origin; the oldest ones beyond that are closed.

What the upstream client never checks in: an aborted, cut or partly read answer, an
HTTP/1.0 answer, or one that said ``Connection: close``. Once the pool is closed (the
relay shuts down) a connection checked in is closed instead of kept.
"""

from __future__ import annotations

import socket
import ssl
import weakref
from dataclasses import dataclass
from typing import Final

from tornado.iostream import IOStream

from relay.clock import Clock, Deadline

IDLE_S: Final = 30.0
MAX_IDLE_PER_ORIGIN: Final = 16

Origin = tuple[str, int, bool]  # host, port, TLS


@dataclass(eq=False)
class _Idle:
    stream: IOStream
    expiry: Deadline


class ConnectionPool:
    def __init__(
        self, clock: Clock, *, idle_s: float = IDLE_S, max_idle: int = MAX_IDLE_PER_ORIGIN
    ) -> None:
        self._clock = clock
        self._idle_s = idle_s
        self._max_idle = max_idle
        self._idle: dict[Origin, list[_Idle]] = {}
        self._origins: weakref.WeakKeyDictionary[IOStream, Origin] = weakref.WeakKeyDictionary()
        self.reused = 0  # checkouts that found a live connection
        self.closed = False  # close() ran: nothing is kept any more

    def remember(self, stream: IOStream, origin: Origin) -> None:
        """A freshly dialed connection to ``origin``; only these can be checked in."""
        self._origins[stream] = origin

    def checkin(self, stream: IOStream) -> None:
        """Keep ``stream`` (at a request boundary) for the next request to its origin."""
        origin = self._origins.get(stream)
        if origin is None or self.closed or not _quiet(stream):
            stream.close()
            return
        waiting = self._idle.setdefault(origin, [])

        def drop() -> None:
            self._drop(origin, entry)

        entry = _Idle(stream, Deadline(self._clock, self._idle_s, drop))
        # The server closing it while it waits (EOF) closes the stream: forget it then.
        stream.set_close_callback(drop)
        waiting.append(entry)
        while len(waiting) > self._max_idle:
            self._drop(origin, waiting[0])

    def checkout(self, origin: Origin) -> IOStream | None:
        """The most recently used live connection to ``origin``, or ``None``."""
        waiting = self._idle.get(origin, [])
        while waiting:
            entry = waiting.pop()  # newest first: the oldest age out
            entry.expiry.stop()
            entry.stream.set_close_callback(None)
            if entry.expiry.remaining > 0 and _quiet(entry.stream):
                self.reused += 1
                return entry.stream
            entry.stream.close()
        return None

    def idle(self, origin: Origin | None = None) -> int:
        """How many connections wait (to ``origin``, or in all)."""
        if origin is not None:
            return len(self._idle.get(origin, []))
        return sum(len(waiting) for waiting in self._idle.values())

    def close(self) -> None:
        """Close every idle connection; one checked in later is closed, not kept."""
        self.closed = True
        for origin in list(self._idle):
            for entry in list(self._idle.get(origin, [])):
                self._drop(origin, entry)
        self._idle.clear()

    def _drop(self, origin: Origin, entry: _Idle) -> None:
        waiting = self._idle.get(origin, [])
        if entry in waiting:
            waiting.remove(entry)
        entry.expiry.stop()
        entry.stream.set_close_callback(None)
        entry.stream.close()


def _quiet(stream: IOStream) -> bool:
    """Open, with nothing read ahead and nothing waiting on the socket (no data, no EOF)."""
    if stream.closed() or stream._read_buffer_size:  # no public accessor
        return False
    sock = stream.socket
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return False
    try:
        # The raw socket, beneath any TLS layer: any byte or an EOF means "not idle".
        socket.socket.recv(sock, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False
