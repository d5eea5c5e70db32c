"""``relay cache verify``: read a stopped relay's store and audit every row (design §6).

The reading lives here; every conclusion is :mod:`relay.core.store_audit`'s (pure). One
read transaction on the connection of :func:`relay.storage.offline.open_stopped` (so no
relay owns the file, and none starts on it meanwhile), in this order:

1. the schema: a reasoning cache of version 5 (no reclaim marks yet) up to the current
   one (v7 only dropped what verify never reads);
2. ``PRAGMA integrity_check`` and ``PRAGMA foreign_key_check``;
3. every observation, oldest first, streamed with its payload's bytes (one row in memory
   at a time: a payload may be megabytes), its parent read by id;
4. the open intents (a note: the next start recovers them).

Nothing read is returned but counts and observation ids.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from relay.core.records import Observation, PriorPlan
from relay.core.store_audit import AuditTally, Damage, Note, StoredRecord, audit_record
from relay.errors import NotACache, StoreCorrupt
from relay.storage.database import store_error
from relay.storage.offline import open_stopped
from relay.storage.schema import (
    RECLAIMED_BEFORE_V6,
    SCHEMA_VERSION,
    SchemaRefused,
    SchemaTooNew,
    check_version,
)

OLDEST_VERIFIED: Final = 5  # linear ancestry; older stores are migrated by opening them
PROGRESS_EVERY: Final = 1000  # records between progress reports

Progress = Callable[[str, int, int], None]  # (phase, done, total)

_COLUMNS: Final = """o.id, o.scope_id, o.generation, o.position, o.start_digest,
    o.end_digest, o.envelope_fp, o.payload_fp, o.output_hash, o.parent_id,
    o.prior_plan_count, o.prior_chain, o.intent_id, o.snapshot, o.replayable, o.observed_at"""


@dataclass(frozen=True)
class VerifyReport:
    path: Path
    schema_version: int
    tally: AuditTally

    @property
    def damaged(self) -> bool:
        return self.tally.damaged

    def to_json(self) -> dict[str, Any]:
        tally = self.tally
        return {
            "path": str(self.path),
            "schemaVersion": self.schema_version,
            "records": tally.records,
            "payloads": tally.payloads,
            "clean": not tally.damaged,
            "damage": tally.damage,
            "notes": tally.notes,
            "examples": {code: ids for code, ids in sorted(tally.examples.items()) if ids},
        }


def _observation(row: tuple[Any, ...]) -> Observation:
    return Observation(
        row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8],
        PriorPlan(row[9], row[10], row[11]), row[12], row[13], bool(row[14]), row[15],
    )  # fmt: skip


def verify_store(path: Path, *, progress: Progress | None = None) -> VerifyReport:
    """Audit the stopped store at ``path``. Raises ``StoreLocked`` while a relay owns it,
    :class:`NotACache` for a file that is no reasoning cache at all and
    :class:`StoreCorrupt` for one verify cannot read."""
    conn = open_stopped(path)
    try:
        conn.execute("BEGIN")  # one consistent view (the lock is ours anyway)
        version = _schema(conn, path)
        tally = AuditTally()
        try:
            _pragmas(conn, tally)
            _records(conn, tally, marks=version >= 6, progress=progress)
            tally.add(Note.OPEN_INTENT, conn.execute("SELECT count(*) FROM intents").fetchone()[0])
        except sqlite3.DatabaseError:
            # A row SQLite cannot read any more (a damaged page): the integrity check has
            # (or should have) named it; the walk cannot go on.
            tally.add(Damage.INTEGRITY_ERROR)
        conn.execute("ROLLBACK")
    except sqlite3.Error as exc:
        raise store_error(exc, path, "verify") from None
    finally:
        conn.close()
    return VerifyReport(path, version, tally)


def _schema(conn: sqlite3.Connection, path: Path) -> int:
    try:
        version = check_version(conn)
    except SchemaTooNew as exc:
        raise StoreCorrupt(f"{path} is not a reasoning cache verify can read: {exc}") from None
    except SchemaRefused as exc:
        raise NotACache(f"{path} is not a relay cache: {exc}") from None
    if version == 0:  # no table at all (check_version refuses tables without a version)
        raise NotACache(f"{path} is an empty SQLite database: not a relay cache")
    if version < OLDEST_VERIFIED:
        raise StoreCorrupt(
            f"{path} has schema version {version}; verify reads {OLDEST_VERIFIED} to "
            f"{SCHEMA_VERSION}: back it up first (the copy is migrated) and verify the copy"
        )
    return version


def _pragmas(conn: sqlite3.Connection, tally: AuditTally) -> None:
    problems = [row[0] for row in conn.execute("PRAGMA integrity_check")]
    if problems != ["ok"]:
        tally.add(Damage.INTEGRITY_ERROR, len(problems))
    for table, rowid, _parent, _fk in conn.execute("PRAGMA foreign_key_check"):
        observation = rowid if table in ("observations", "payloads") else None
        tally.add(Damage.FOREIGN_KEY_VIOLATION, observation_id=observation)


def _records(
    conn: sqlite3.Connection, tally: AuditTally, *, marks: bool, progress: Progress | None
) -> None:
    total = conn.execute("SELECT count(*) FROM observations").fetchone()[0]
    reclaimed = "o.reclaimed_at" if marks else "NULL"
    rows = conn.execute(
        f"SELECT {_COLUMNS}, {reclaimed}, CAST(p.output_json AS BLOB), p.size "  # noqa: S608
        "FROM observations o LEFT JOIN payloads p ON p.observation_id = o.id ORDER BY o.id"
    )
    if progress is not None:
        progress("records", 0, total)
    for done, row in enumerate(rows, start=1):
        record = StoredRecord(_observation(row), row[16], row[17], row[18], reclaim_marks=marks)
        parent = _parent(conn, record.observation)
        tally.records += 1
        tally.payloads += record.payload is not None
        tally.add_all(audit_record(record, parent, before_v6=RECLAIMED_BEFORE_V6), row[0])
        if progress is not None and (done % PROGRESS_EVERY == 0 or done == total):
            progress("records", done, total)


def _parent(conn: sqlite3.Connection, record: Observation) -> Observation | None:
    parent_id = record.prior_plan.parent_id
    if parent_id is None:
        return None
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM observations o WHERE o.id = ?",  # noqa: S608
        (parent_id,),
    ).fetchone()
    return None if row is None else _observation(row)
