"""The diagnostics database: hourly token and replay tallies, beside the store.

Not the safety ledger: nothing here decides a replay, and losing the file loses history
only. Its own retention (``RELAY_STATS_RETENTION_DAYS``), its own file
(``<store dir>/relay-stats.sqlite``), ``synchronous=NORMAL`` (a crash may lose the last
flush; that is all). Rows hold hours, body shapes, bounded model labels, outcome and
reason codes and counts: nothing that identifies a conversation or its content.

One connection, used from the flushing thread and the loop's readers under a lock.
Methods raise ``sqlite3.Error``/``OSError``; the writer (relay.ops.stats_writer) logs.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import Counter
from pathlib import Path
from typing import Final

from relay.core.token_usage import TALLY_FIELDS, HourDelta, Key, Tallies, Tally

FILE_NAME: Final = "relay-stats.sqlite"
SCHEMA_VERSION: Final = 1
APPLICATION_ID: Final = 0x52535431  # "RST1": a relay stats file, not some other database
_COLUMNS: Final = ", ".join(TALLY_FIELDS)
_SCHEMA: Final = f"""
CREATE TABLE IF NOT EXISTS token_hours (
    hour INTEGER NOT NULL, shape TEXT NOT NULL, model TEXT NOT NULL, outcome TEXT NOT NULL,
    {", ".join(f"{name} INTEGER NOT NULL DEFAULT 0" for name in TALLY_FIELDS)},
    PRIMARY KEY (hour, shape, model, outcome)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS event_hours (
    hour INTEGER NOT NULL, kind TEXT NOT NULL, reason TEXT NOT NULL,
    count INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (hour, kind, reason)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS latency_hours (
    hour INTEGER NOT NULL, bound_ms INTEGER NOT NULL, count INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (hour, bound_ms)
) WITHOUT ROWID;
"""
_TALLY_UPSERT: Final = (
    f"INSERT INTO token_hours (hour, shape, model, outcome, {_COLUMNS}) "  # noqa: S608 - constant
    f"VALUES (?, ?, ?, ?, {', '.join('?' for _ in TALLY_FIELDS)}) "
    "ON CONFLICT (hour, shape, model, outcome) DO UPDATE SET "
    + ", ".join(f"{name} = {name} + excluded.{name}" for name in TALLY_FIELDS)
)
_TALLY_SELECT: Final = (
    f"SELECT hour, shape, model, outcome, {_COLUMNS} FROM token_hours WHERE hour >= ?"  # noqa: S608 - constant
)
_TABLES: Final = ("token_hours", "event_hours", "latency_hours")


def _check(conn: sqlite3.Connection, path: Path) -> None:
    application_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if application_id not in (0, APPLICATION_ID) or version > SCHEMA_VERSION:
        raise sqlite3.DatabaseError(
            f"{path} is not a relay stats database of this version; move it away"
        )


class StatsDB:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            _check(conn, path)
            conn.executescript(_SCHEMA)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    @classmethod
    def beside(cls, store_path: Path) -> StatsDB:
        return cls(store_path.parent / FILE_NAME)

    def add(self, delta: HourDelta) -> None:
        """Add a delta, in one transaction."""
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    _TALLY_UPSERT,
                    [
                        (k.hour, k.shape, k.model, k.outcome,
                         *(getattr(t, name) for name in TALLY_FIELDS))
                        for k, t in delta.tallies.by_key.items()
                    ],
                )  # fmt: skip
                conn.executemany(
                    "INSERT INTO event_hours (hour, kind, reason, count) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (hour, kind, reason) DO UPDATE SET count = count + excluded.count",
                    [(h, kind, reason, n) for (h, kind, reason), n in delta.events.items()],
                )
                conn.executemany(
                    "INSERT INTO latency_hours (hour, bound_ms, count) VALUES (?, ?, ?) "
                    "ON CONFLICT (hour, bound_ms) DO UPDATE SET count = count + excluded.count",
                    [(h, bound, n) for (h, bound), n in delta.latency.items()],
                )
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def since(self, hour: int) -> HourDelta:
        """Everything from ``hour`` (inclusive) on, as one delta."""
        out = HourDelta()
        with self._lock:
            rows = self._conn.execute(_TALLY_SELECT, (hour,)).fetchall()
            events = self._conn.execute(
                "SELECT hour, kind, reason, count FROM event_hours WHERE hour >= ?", (hour,)
            ).fetchall()
            latency = self._conn.execute(
                "SELECT hour, bound_ms, count FROM latency_hours WHERE hour >= ?", (hour,)
            ).fetchall()
        out.tallies = Tallies({Key(*row[:4]): Tally(*(int(v) for v in row[4:])) for row in rows})
        out.events = Counter({(int(h), k, r): int(n) for h, k, r, n in events})
        out.latency = Counter({(int(h), int(b)): int(n) for h, b, n in latency})
        return out

    def prune(self, before_hour: int) -> int:
        """Delete every hour before ``before_hour``; how many rows went."""
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                gone = sum(
                    conn.execute(f"DELETE FROM {table} WHERE hour < ?", (before_hour,)).rowcount  # noqa: S608 - constant
                    for table in _TABLES
                )
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        return gone

    def size_bytes(self) -> int:
        return sum(
            p.stat().st_size
            for p in (self.path, self.path.with_name(self.path.name + "-wal"))
            if p.exists()
        )

    def close(self) -> None:
        with self._lock:
            self._conn.close()
