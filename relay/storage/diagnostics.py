"""Read-only views of the store for the admin socket, the cache API and ``relay status``:
integrity, row counts, the newest records' metadata (never a payload or ciphertext) and
the bounded aggregates (:mod:`relay.storage.aggregates`); plus the page copy behind the
online inspection snapshot (:mod:`relay.storage.sqlite_copy`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Final

from relay.errors import StoreError
from relay.storage.aggregates import StoreAggregates, read_aggregates, source_bytes
from relay.storage.database import Database
from relay.storage.interface import RecordSummary
from relay.storage.schema import TABLES
from relay.storage.sqlite_copy import copy_pages

# Both stores' recent-records query (without its filter, order and limit, which differ
# only in placeholders) and the row builder.
RECENT_RECORDS: Final = (
    "SELECT o.id, s.model, o.snapshot, o.position, o.replayable, p.size, o.end_digest,"
    " o.observed_at, p.touched_at FROM observations o JOIN scopes s ON s.id = o.scope_id"
    " LEFT JOIN payloads p ON p.observation_id = o.id"
)


def record_summaries(rows: Iterable[Sequence[Any]]) -> list[RecordSummary]:
    """:data:`RECENT_RECORDS`'s rows as the cache API shows them (a digest's first 12)."""
    return [
        RecordSummary(r[0], r[1], r[2], r[3], bool(r[4]), r[5], r[6][:12], r[7], r[8]) for r in rows
    ]


class Diagnostics:
    def __init__(self, db: Database) -> None:
        self._db = db

    def integrity_check(self) -> list[str]:
        """``PRAGMA integrity_check`` rows: ``["ok"]`` for a healthy database."""
        with self._db.read("check integrity") as conn:
            return [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]

    def recent_records(self, *, model: str | None, limit: int) -> list[RecordSummary]:
        """Metadata of the newest observations (never payload or ciphertext): for the
        cache API. ``model`` filters on the scope's resolved model."""
        sql = RECENT_RECORDS
        params: tuple[object, ...] = ()
        if model is not None:
            sql, params = sql + " WHERE s.model = ?", (model,)
        with self._db.read("read observations") as conn:
            rows = conn.execute(sql + " ORDER BY o.id DESC LIMIT ?", (*params, limit)).fetchall()
        return record_summaries(rows)

    def aggregates(self, *, scan_rows: int) -> StoreAggregates:
        """Bounded, read-only counts for the admin socket (relay.storage.aggregates)."""
        with self._db.read("read aggregates") as conn:
            return read_aggregates(conn, self._db.path, scan_rows=scan_rows)

    def source_bytes(self) -> int:
        """What an inspection copy would copy: the main file's pages, in bytes."""
        with self._db.read("read the page count") as conn:
            return source_bytes(conn)

    def copy_for_inspection(
        self,
        target: Path,
        *,
        pages: int,
        wait_turn: Callable[[], None],
        stepped: Callable[[int, int], None],
    ) -> None:
        """The online backup into ``target`` (on a worker thread, in lockstep with the
        IOLoop: relay.storage.sqlite_copy)."""
        conn = self._db.connection
        if conn is None:
            raise StoreError(f"reasoning cache {self._db.path} is closed")
        copy_pages(conn, target, pages=pages, wait_turn=wait_turn, stepped=stepped)

    def stats(self) -> dict[str, int]:
        """Row counts per table plus stored payload bytes, for diagnostics."""
        with self._db.read("count rows") as conn:
            count = "SELECT count(*) FROM {}"  # table names are constants
            counts = {t: conn.execute(count.format(t)).fetchone()[0] for t in TABLES}
            counts["payload_bytes"] = conn.execute(
                "SELECT coalesce(sum(size), 0) FROM payloads"
            ).fetchone()[0]
        return counts
