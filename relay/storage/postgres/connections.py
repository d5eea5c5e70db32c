"""The store's connections: a few kept open for reuse, a new one made on demand.

Not psycopg_pool's ``ConnectionPool``: its background reconnection backs off
exponentially while the server is down (1 s, 2 s, 4 s … up to minutes after a long
outage), so requests kept failing with 503 long after the database was back, and a
connection the server closed while idle (a restart) was handed to the next request. Here
nothing runs in the background: a connection is checked before use without a round trip
(an idle connection has nothing to read, so a readable socket means the server closed it,
or sent something unsolicited, and it is asked once), a dead one is dropped, and when none
is left the next request connects, so the first request after the database returns is
served. While the server is down, connecting fails at once (no socket, connection
refused) or within ``connect_timeout``.
"""

from __future__ import annotations

import select
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import psycopg
from psycopg.pq import TransactionStatus

Conn = psycopg.Connection[tuple[Any, ...]]
MAX_IDLE: Final = 4  # connections kept for reuse (the IOLoop uses one at a time)


class Connections:
    """Thread-safe: the IOLoop and, in tests, other threads take connections."""

    def __init__(self, conninfo: str, *, connect_timeout: int) -> None:
        self._conninfo = conninfo
        self._connect_timeout = connect_timeout
        self._idle: list[Conn] = []
        self._lock = threading.Lock()
        self._closed = False

    def connect(self) -> Conn:
        """A new autocommit connection (``psycopg.OperationalError`` when it cannot)."""
        return psycopg.connect(
            self._conninfo, autocommit=True, connect_timeout=self._connect_timeout
        )

    @contextmanager
    def connection(self) -> Iterator[Conn]:
        conn = self._take()
        try:
            yield conn
        finally:
            self._give_back(conn)

    def close(self) -> None:
        with self._lock:
            idle, self._idle, self._closed = self._idle, [], True
        for conn in idle:
            conn.close()

    def _take(self) -> Conn:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self.connect()
            if usable(conn):
                return conn
            conn.close()

    def _give_back(self, conn: Conn) -> None:
        reusable = (
            not conn.closed
            and not conn.broken
            and conn.info.transaction_status == TransactionStatus.IDLE
        )
        with self._lock:
            if reusable and not self._closed and len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()


def usable(conn: Conn) -> bool:
    """Whether an idle connection still works, asking the server only when its socket
    has something to read (the server closed it, or sent a notice)."""
    if conn.closed or conn.broken:
        return False
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
        if readable:
            conn.execute("SELECT 1")
    except (psycopg.Error, OSError, ValueError):
        return False
    return True
