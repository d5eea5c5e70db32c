"""The store's connections: a few kept open for reuse, a new one made on demand, and a
database known to be down refused at once until a background probe reaches it again.

Not psycopg_pool's ``ConnectionPool``: its background reconnection backs off
exponentially while the server is down (1 s, 2 s, 4 s … up to minutes after a long
outage), so requests kept failing with 503 long after the database was back, and a
connection the server closed while idle (a restart) was handed to the next request. Here
a connection is checked before use without a round trip (an idle connection has nothing
to read, so a readable socket means the server closed it, or sent something unsolicited,
and it is asked once), a dead one is dropped, and when none is left the caller connects.

A connect that fails marks the database *known down*: from then on every caller is
refused at once (:class:`StoreDown`, no socket), because a connect attempt on the IOLoop
would stall every other request for up to ``connect_timeout``. Reaching it again is a
probe's job: a caller that finds a probe due (at most one every :data:`PROBE_FIRST_S`,
doubling to :data:`PROBE_CAP_S`, on the injected monotonic clock) starts one in a
thread, off the loop, and is refused like the others; the probe's connection, when it
gets one, is kept for the next caller, so the relay serves again within about a second of
the database's return, without an operator.
"""

from __future__ import annotations

import select
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

import psycopg
from psycopg.pq import TransactionStatus

from relay.errors import InternalSignal

Conn = psycopg.Connection[tuple[Any, ...]]
MAX_IDLE: Final = 4  # connections kept for reuse (the IOLoop uses one at a time)
PROBE_FIRST_S: Final = 0.1  # the first probe after a failure, then doubling …
PROBE_CAP_S: Final = 1.0  # … to at most this: recovery stays prompt


class StoreDown(psycopg.OperationalError, InternalSignal):
    """The database is known to be down: refused without a connect attempt."""


def in_thread(job: Callable[[], None]) -> None:
    """Run ``job`` off the caller's thread (a probe's connect may block for seconds)."""
    threading.Thread(target=job, name="relay-pg-probe", daemon=True).start()


class Connections:
    """Thread-safe: the IOLoop, the probe and, in tests, other threads take connections.
    ``monotonic`` times the probes; ``spawn`` runs one (tests pass a synchronous one)."""

    def __init__(
        self, conninfo: str, *, connect_timeout: int, monotonic: Callable[[], float],
        spawn: Callable[[Callable[[], None]], None] = in_thread,
    ) -> None:  # fmt: skip
        self._conninfo = conninfo
        self._connect_timeout = connect_timeout
        self._monotonic = monotonic
        self._spawn = spawn
        self._idle: list[Conn] = []
        self._lock = threading.Lock()
        self._closed = False
        self._probe_at: float | None = None  # None: up; else when the next probe may start
        self._backoff_s = PROBE_FIRST_S
        self._probing = False
        self._settled = threading.Event()  # set while no probe runs
        self._settled.set()
        self.connect_attempts = 0  # diagnostics: every connect, probes included
        self.refused = 0  # callers refused while known down

    @property
    def known_down(self) -> bool:
        with self._lock:
            return self._probe_at is not None

    def connect(self) -> Conn:
        """A new autocommit connection (``psycopg.OperationalError`` when it cannot)."""
        with self._lock:
            self.connect_attempts += 1
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

    def wait_probe(self, timeout_s: float) -> bool:
        """Wait for a running probe to finish; whether none is running now (for tests and
        the CLI: the relay never waits for one)."""
        return self._settled.wait(timeout_s)

    def close(self) -> None:
        with self._lock:
            idle, self._idle, self._closed = self._idle, [], True
        for conn in idle:
            conn.close()

    def _take(self) -> Conn:
        while True:
            with self._lock:
                down = self._probe_at is not None
                probe = down and self._claim_probe()
                conn = self._idle.pop() if self._idle and not down else None
                if down:
                    self.refused += 1
            if down:
                if probe:
                    self._start_probe()
                raise StoreDown("the database was unreachable at the last attempt")
            if conn is None:
                return self._connect_or_mark_down()
            if usable(conn):
                return conn
            conn.close()

    def _claim_probe(self) -> bool:
        """Under the lock: whether this caller starts the probe (one at a time, when due)."""
        assert self._probe_at is not None
        if self._probing or self._monotonic() < self._probe_at:
            return False
        self._probing = True
        self._settled.clear()
        return True

    def _start_probe(self) -> None:
        try:
            self._spawn(self._probe)
        except BaseException:
            with self._lock:  # no thread started: let the next caller try again
                self._probing = False
                self._settled.set()
            raise

    def _connect_or_mark_down(self) -> Conn:
        try:
            return self.connect()
        except psycopg.OperationalError:
            with self._lock:
                if self._probe_at is None:
                    self._backoff_s = PROBE_FIRST_S
                    self._probe_at = self._monotonic() + self._backoff_s
            raise

    def _probe(self) -> None:
        """Off the loop: connect once; keep the connection and mark the database up, or
        schedule the next probe after a longer pause (capped)."""
        try:
            conn: Conn | None = self.connect()
        except psycopg.Error:
            conn = None
        with self._lock:
            if conn is None:
                self._backoff_s = min(self._backoff_s * 2, PROBE_CAP_S)
                self._probe_at = self._monotonic() + self._backoff_s
            else:
                self._probe_at, self._backoff_s = None, PROBE_FIRST_S
                if not self._closed and len(self._idle) < MAX_IDLE:
                    self._idle.append(conn)
                    conn = None
            self._probing = False
            self._settled.set()
        if conn is not None:
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
