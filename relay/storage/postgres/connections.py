"""The store's connections: a few kept open for reuse, a new one made on demand, and a
database known to be down refused at once until a background probe reaches it again.

Not psycopg_pool's ``ConnectionPool``: its background reconnection backs off
exponentially while the server is down (1 s, 2 s, 4 s … up to minutes after a long
outage), so requests kept failing with 503 long after the database was back, and a
connection the server closed while idle (a restart) was handed to the next request. Here
a connection is checked before use without a round trip (an idle connection has nothing
to read, so a readable socket means the server closed it, or sent something unsolicited,
and it is asked once), a dead one is dropped, and when none is left the caller connects.

A caller that needs a new connection never connects on its own thread: the connect runs
in a thread of its own and the caller waits for it at most :data:`CONNECT_BUDGET_S`. A
server that answers (or refuses) answers well within it; a host that drops packets
silently, or a server that accepts and never speaks, would otherwise hold the caller,
the IOLoop, for the whole ``connect_timeout`` (2 s) and every other request with it. A
connect that fails, or is still running when the budget is spent, marks the database
*known down* (the one still running becomes the probe, below): from then on every caller
is refused at once (:class:`StoreDown`, no socket). Reaching it again is a probe's job:
a caller that finds a probe due (at most one every :data:`PROBE_FIRST_S`, doubling to
:data:`PROBE_CAP_S`, on the injected monotonic clock) starts one in a thread, off the
loop, and is refused like the others; the probe's connection, when it gets one, is kept
for the next caller, so the relay serves again within about a second of the database's
return, without an operator.
"""

from __future__ import annotations

import select
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus

from relay.errors import InternalSignal

Conn = psycopg.Connection[tuple[Any, ...]]
MAX_IDLE: Final = 4  # connections kept for reuse (the IOLoop uses one at a time)
PROBE_FIRST_S: Final = 0.1  # the first probe after a failure, then doubling …
PROBE_CAP_S: Final = 1.0  # … to at most this: recovery stays prompt
# How long a caller (the IOLoop) waits for a new connection: many round trips on any
# network a relay should share a database over, and a quarter of libpq's timeout.
CONNECT_BUDGET_S: Final = 0.5
# libpq settings for a connection already open when its host goes silent: the store's
# queries run on the IOLoop, and without these a query waits for the kernel's own TCP
# give-up (about 15 minutes of retransmissions) with every other request behind it. With
# them a silent host is noticed within ~5 s whether the relay is sending (unacknowledged
# data) or waiting for an answer (keepalive probes). A conninfo that sets any of them wins.
TCP_DEFAULTS: Final = {
    "keepalives": "1",
    "keepalives_idle": "2",  # seconds idle before the first probe
    "keepalives_interval": "1",
    "keepalives_count": "3",
    "tcp_user_timeout": "5000",  # milliseconds sent data may stay unacknowledged
}


def with_tcp_defaults(conninfo: str) -> str:
    """``conninfo`` with :data:`TCP_DEFAULTS` for every key it does not set itself (a Unix
    socket ignores them)."""
    given = conninfo_to_dict(conninfo)
    return make_conninfo(conninfo, **{k: v for k, v in TCP_DEFAULTS.items() if k not in given})


class StoreDown(psycopg.OperationalError, InternalSignal):
    """The database is known to be down: refused without a connect attempt."""


def in_thread(job: Callable[[], None]) -> None:
    """Run ``job`` off the caller's thread (a probe's connect may block for seconds)."""
    threading.Thread(target=job, name="relay-pg-probe", daemon=True).start()


@dataclass
class _Attempt:
    """One caller's connect, in its own thread; read and written under the lock."""

    done: threading.Event = field(default_factory=threading.Event)
    conn: Conn | None = None
    error: psycopg.Error | None = None
    abandoned: bool = False  # the caller stopped waiting: the result is the probe's
    probe: bool = False  # … and this attempt is the running probe


class Connections:
    """Thread-safe: the IOLoop, the probe and, in tests, other threads take connections.
    ``monotonic`` times the probes; ``spawn`` runs one (tests pass a synchronous one).
    ``budget_s``: how long a caller waits for a new connection."""

    def __init__(
        self, conninfo: str, *, connect_timeout: int, monotonic: Callable[[], float],
        spawn: Callable[[Callable[[], None]], None] = in_thread,
        budget_s: float = CONNECT_BUDGET_S,
    ) -> None:  # fmt: skip
        self._conninfo = with_tcp_defaults(conninfo)
        self._connect_timeout = connect_timeout
        self._budget_s = budget_s
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

    def warm(self) -> None:
        """At startup, before serving: connect on the caller's thread, with the whole
        ``connect_timeout``, and keep the connection (``psycopg.OperationalError`` when it
        cannot)."""
        self._give_back(self.connect())

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
        """A new connection, made in a thread and waited for at most the budget. Failed:
        its error, the database marked down. Still connecting: :class:`StoreDown`, the
        database marked down and the attempt left to finish as the probe."""
        attempt = _Attempt()
        in_thread(lambda: self._attempt(attempt))
        attempt.done.wait(self._budget_s)
        with self._lock:
            if attempt.conn is not None:
                return attempt.conn
            self._mark_down()
            if attempt.error is not None:
                raise attempt.error
            attempt.abandoned = True
            if not self._probing:
                attempt.probe = self._probing = True
                self._settled.clear()
        raise StoreDown(f"the database did not answer within {self._budget_s:g} s")

    def _attempt(self, attempt: _Attempt) -> None:
        conn: Conn | None = None
        error: psycopg.Error | None = None
        try:
            conn = self.connect()
        except psycopg.Error as exc:
            error = exc
        with self._lock:
            attempt.conn, attempt.error = conn, error
            attempt.done.set()
            abandoned, probe = attempt.abandoned, attempt.probe
        if abandoned:
            self._probed(conn, probe=probe)

    def _mark_down(self) -> None:
        """Under the lock: the database is known down from now (if not already)."""
        if self._probe_at is None:
            self._backoff_s = PROBE_FIRST_S
            self._probe_at = self._monotonic() + self._backoff_s

    def _probe(self) -> None:
        """Off the loop: connect once; keep the connection and mark the database up, or
        schedule the next probe after a longer pause (capped)."""
        try:
            conn: Conn | None = self.connect()
        except psycopg.Error:
            conn = None
        self._probed(conn, probe=True)

    def _probed(self, conn: Conn | None, *, probe: bool) -> None:
        """A connect off the loop finished: a connection marks the database up and is
        kept; a failure of the running probe schedules the next one after a longer pause
        (capped). ``probe``: this connect was the running probe (it ends now)."""
        with self._lock:
            if conn is not None:
                self._probe_at, self._backoff_s = None, PROBE_FIRST_S
                if not self._closed and len(self._idle) < MAX_IDLE:
                    self._idle.append(conn)
                    conn = None
            elif probe:
                self._backoff_s = min(self._backoff_s * 2, PROBE_CAP_S)
                self._probe_at = self._monotonic() + self._backoff_s
            if probe:
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
