"""Read-only views of the shared store for the admin socket, the cache API and ``relay
status`` (:mod:`relay.storage.diagnostics`'s, over PostgreSQL): integrity of what is ours
to check, row counts, the newest records' metadata (never a payload) and the bounded
aggregates (:mod:`relay.storage.aggregates`). The inspection snapshot copies SQLite pages:
here it is refused, naming ``pg_dump``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from relay.errors import StoreError
from relay.storage.aggregates import PAYLOAD_BYTES_SCAN_ROWS, Bounded, StoreAggregates
from relay.storage.diagnostics import RECENT_RECORDS, record_summaries
from relay.storage.interface import RecordSummary
from relay.storage.postgres.database import Database
from relay.storage.postgres.schema import SCHEMA_VERSION, TABLES

# The tables relay.storage.aggregates counts (constants interpolated into SQL).
AGGREGATED: Final = ("scopes", "observations", "payloads", "markers", "intents", "strict_entries")


class Diagnostics:
    def __init__(self, db: Database) -> None:
        self._db = db

    def integrity_check(self) -> list[str]:
        """PostgreSQL keeps its own pages consistent; what can break is ours: rows whose
        references no constraint checks (an intent's pins, a record's parent)."""
        with self._db.read("check integrity") as conn:
            row = conn.execute(
                "SELECT (SELECT count(*) FROM observations o WHERE parent_id IS NOT NULL "
                "AND NOT EXISTS (SELECT 1 FROM observations p WHERE p.id = o.parent_id)), "
                "(SELECT version FROM relay_schema)"
            ).fetchone()
        assert row is not None
        problems = []
        if row[0]:
            problems.append(f"{row[0]} observations link to a missing parent")
        if row[1] != SCHEMA_VERSION:
            problems.append(f"schema version {row[1]}, expected {SCHEMA_VERSION}")
        return problems or ["ok"]

    def recent_records(self, *, model: str | None, limit: int) -> list[RecordSummary]:
        sql = RECENT_RECORDS
        params: tuple[object, ...] = ()
        if model is not None:
            sql, params = sql + " WHERE s.model = %s", (model,)
        with self._db.read("read observations") as conn:
            rows = conn.execute(
                (sql + " ORDER BY o.id DESC LIMIT %s").encode(), (*params, limit)
            ).fetchall()
        return record_summaries(rows)

    def aggregates(self, *, scan_rows: int) -> StoreAggregates:
        """The admin socket's bounded counts (:mod:`relay.storage.aggregates`), in one
        read-only transaction: an admin poll writes nothing. ``file_bytes`` is the whole
        database's size (``pg_database_size``); there is no WAL of the relay's own."""
        limit = min(scan_rows, PAYLOAD_BYTES_SCAN_ROWS)
        with self._db.snapshot("read aggregates") as conn:
            counts: dict[str, Bounded] = {}
            for table in AGGREGATED:  # constants
                sql = f"SELECT count(*) FROM (SELECT 1 FROM {table} LIMIT %s) AS t"  # noqa: S608
                n = _one(conn.execute(sql.encode(), (scan_rows + 1,)).fetchone())
                counts[table] = Bounded(min(n, scan_rows), n <= scan_rows)
            row = conn.execute(
                "SELECT count(*), coalesce(sum(size), 0) FROM "
                "(SELECT size FROM payloads LIMIT %s) AS p",
                (limit,),
            ).fetchone()
            assert row is not None
            more = conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM payloads LIMIT %s) AS p", (limit + 1,)
            ).fetchone()
            row2 = conn.execute(
                "SELECT pg_database_size(current_database()), "
                "(SELECT min(touched_at) FROM payloads), "
                "(SELECT observed_at FROM observations ORDER BY id DESC LIMIT 1)"
            ).fetchone()
            assert row2 is not None
        return StoreAggregates(
            file_bytes=int(row2[0]),
            free_bytes=0,
            wal_bytes=0,
            counts=counts,
            payload_bytes=Bounded(int(row[1]), _one(more) <= limit),
            oldest_payload_touched_at=row2[1],
            newest_observation_at=row2[2],
        )

    def source_bytes(self) -> int:
        """What an inspection copy would read: the database's size."""
        return self._db.used_bytes()

    def copy_for_inspection(
        self,
        target: Path,
        *,
        pages: int,
        wait_turn: Callable[[], None],
        stepped: Callable[[int, int], None],
    ) -> None:
        """No SQLite pages to copy: the shared store's inspection copy is pg_dump's."""
        raise StoreError(
            f"reasoning cache {self._db.url}: the inspection snapshot copies a SQLite store; "
            "for the shared PostgreSQL store use pg_dump --format=custom on a replica or "
            "during a quiet period"
        )

    def stats(self) -> dict[str, int]:
        with self._db.read("count rows") as conn:
            counts: dict[str, int] = {}
            for table in TABLES:  # constants
                row = conn.execute(f"SELECT count(*) FROM {table}".encode()).fetchone()  # noqa: S608
                counts[table] = int(row[0]) if row is not None else 0
            row = conn.execute("SELECT coalesce(sum(size), 0) FROM payloads").fetchone()
            counts["payload_bytes"] = int(row[0]) if row is not None else 0
        return counts


def _one(row: Sequence[Any] | None) -> int:
    return 0 if row is None else int(row[0])
