"""Read-only aggregates of the store for the admin socket's status (design §18).

Every query here is a ``SELECT`` or a read-only PRAGMA run with ``PRAGMA query_only`` on,
so an admin poll can never touch a payload, renew an intent, move a retention clock,
checkpoint the WAL or run cleanup. Counts scan at most ``scan_rows`` rows each: a count
that reaches the bound is reported as a lower bound (``exact=False``), never extrapolated.
Payload bytes read the ``size`` column only, but that column follows the payload's text
in the row (its overflow pages are walked), so its scan has a tighter bound of its own.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

DEFAULT_SCAN_ROWS: Final = 100_000
PAYLOAD_BYTES_SCAN_ROWS: Final = 2_000

# Table names interpolated below are these constants, never caller input.
_COUNTED: Final = ("scopes", "observations", "payloads", "markers", "intents", "strict_entries")


@dataclass(frozen=True)
class Bounded:
    """A count or sum from a bounded scan: exact, or a lower bound when the scan stopped."""

    value: int
    exact: bool

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "exact": self.exact}


@dataclass(frozen=True)
class StoreAggregates:
    file_bytes: int  # page_count * page_size of the main file (exact)
    free_bytes: int  # pages on the freelist (exact)
    wal_bytes: int  # the -wal file's size on disk (0 without one)
    counts: dict[str, Bounded]  # rows per table in _COUNTED
    payload_bytes: Bounded  # serialized payload bytes
    oldest_payload_touched_at: float | None  # wall seconds; None without payloads
    newest_observation_at: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "fileBytes": self.file_bytes,
            "freeBytes": self.free_bytes,
            "walBytes": self.wal_bytes,
            "counts": {name: count.to_json() for name, count in self.counts.items()},
            "payloadBytes": self.payload_bytes.to_json(),
            "oldestPayloadTouchedAt": self.oldest_payload_touched_at,
            "newestObservationAt": self.newest_observation_at,
        }


def _bounded_count(conn: sqlite3.Connection, table: str, limit: int) -> Bounded:
    sql = f"SELECT count(*) FROM (SELECT 1 FROM {table} LIMIT ?)"  # noqa: S608 - constant
    (n,) = conn.execute(sql, (limit + 1,)).fetchone()
    return Bounded(min(n, limit), n <= limit)


def read_aggregates(
    conn: sqlite3.Connection, path: Path, *, scan_rows: int = DEFAULT_SCAN_ROWS
) -> StoreAggregates:
    """The aggregates, read on the owner's connection (outside any transaction)."""
    conn.execute("PRAGMA query_only = 1")  # belt and braces: nothing below may write
    try:
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        page_count = int(conn.execute("PRAGMA page_count").fetchone()[0])
        free_pages = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
        counts = {table: _bounded_count(conn, table, scan_rows) for table in _COUNTED}
        limit = min(scan_rows, PAYLOAD_BYTES_SCAN_ROWS)
        n, total = conn.execute(
            "SELECT count(*), coalesce(sum(size), 0) FROM (SELECT size FROM payloads LIMIT ?)",
            (limit + 1,),
        ).fetchone()
        if n > limit:  # one row too many was summed: report the first ``limit`` only
            (total,) = conn.execute(
                "SELECT coalesce(sum(size), 0) FROM (SELECT size FROM payloads LIMIT ?)",
                (limit,),
            ).fetchone()
        # Both through an index: O(log n), exact.
        (oldest,) = conn.execute("SELECT min(touched_at) FROM payloads").fetchone()
        (newest,) = conn.execute("SELECT max(id) FROM observations").fetchone()
        newest_at = None
        if newest is not None:
            (newest_at,) = conn.execute(
                "SELECT observed_at FROM observations WHERE id = ?", (newest,)
            ).fetchone()
    finally:
        conn.execute("PRAGMA query_only = 0")
    wal = path.with_name(path.name + "-wal")
    try:
        wal_bytes = wal.stat().st_size
    except FileNotFoundError:
        wal_bytes = 0
    return StoreAggregates(
        file_bytes=page_size * page_count,
        free_bytes=page_size * free_pages,
        wal_bytes=wal_bytes,
        counts=counts,
        payload_bytes=Bounded(int(total), n <= limit),
        oldest_payload_touched_at=oldest,
        newest_observation_at=newest_at,
    )


def source_bytes(conn: sqlite3.Connection) -> int:
    """The main file's logical size (what a backup copies), read-only."""
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    page_count = int(conn.execute("PRAGMA page_count").fetchone()[0])
    return page_size * page_count
