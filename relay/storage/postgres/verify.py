"""``relay cache verify`` on the shared store: the audit of :mod:`relay.storage.verify`
(every record's conclusions are :mod:`relay.core.store_audit`'s) over one consistent
snapshot of the database (``REPEATABLE READ``, ``READ ONLY``), so it runs while relays
serve and writes nothing. PostgreSQL checks its own pages; what is ours to check is every
record, its payload bytes and its parent link. Open intents are a note: on a shared
store, relays that are serving hold some.
"""

from __future__ import annotations

from typing import Any

import psycopg

from relay.core.store_audit import AuditTally, Note, StoredRecord, audit_record
from relay.errors import NotACache, StoreCorrupt, StoreError
from relay.settings.database_url import DatabaseUrl
from relay.storage.postgres.database import store_error
from relay.storage.postgres.schema import check_version
from relay.storage.schema import RECLAIMED_BEFORE_V6, SchemaRefused, SchemaTooNew
from relay.storage.verify import (
    AUDIT_COLUMNS,
    PROGRESS_EVERY,
    Progress,
    VerifyReport,
    audited_observation,
)


def verify_shared(url: DatabaseUrl, *, progress: Progress | None = None) -> VerifyReport:
    """Audit the shared store at ``url``. Raises :class:`NotACache` for a database that
    holds no reasoning cache, :class:`StoreCorrupt` for one a newer relay wrote, other
    ``StoreError``\\ s when it cannot be reached."""
    try:
        with (
            psycopg.connect(url.conninfo, autocommit=True, connect_timeout=10) as conn,
            conn.transaction(),
        ):
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                version = check_version(conn)
            except SchemaTooNew as exc:
                raise StoreCorrupt(
                    f"{url} is not a reasoning cache verify can read: {exc}"
                ) from None
            except SchemaRefused as exc:
                raise NotACache(f"{url} is not a relay cache: {exc}") from None
            if version == 0:
                raise NotACache(f"{url} holds no reasoning cache (no relay_schema)")
            tally = AuditTally()
            _records(conn, tally, progress)
            row = conn.execute("SELECT count(*) FROM intents").fetchone()
            tally.add(Note.OPEN_INTENT, 0 if row is None else int(row[0]))
    except StoreError:
        raise
    except psycopg.Error as exc:
        raise store_error(exc, str(url), "verify") from None
    return VerifyReport(str(url), version, tally)


def _records(
    conn: psycopg.Connection[tuple[Any, ...]], tally: AuditTally, progress: Progress | None
) -> None:
    row = conn.execute("SELECT count(*) FROM observations").fetchone()
    total = 0 if row is None else int(row[0])
    if progress is not None:
        progress("records", 0, total)
    parents = conn.cursor()
    # A server-side cursor: one row in memory at a time (a payload may be megabytes).
    with conn.cursor(name="relay_verify") as rows:
        rows.execute(
            f"SELECT {AUDIT_COLUMNS}, o.reclaimed_at, p.output_json, p.size "  # noqa: S608
            "FROM observations o LEFT JOIN payloads p ON p.observation_id = o.id "
            "ORDER BY o.id".encode()
        )
        for done, found in enumerate(rows, start=1):
            payload = None if found[17] is None else bytes(found[17])
            record = StoredRecord(audited_observation(found), found[16], payload, found[18],
                                  reclaim_marks=True)  # fmt: skip
            parent = None
            parent_id = record.observation.prior_plan.parent_id
            if parent_id is not None:
                hit = parents.execute(
                    f"SELECT {AUDIT_COLUMNS} FROM observations o WHERE o.id = %s".encode(),  # noqa: S608
                    (parent_id,),
                ).fetchone()
                parent = None if hit is None else audited_observation(hit)
            tally.records += 1
            tally.payloads += record.payload is not None
            tally.add_all(audit_record(record, parent, before_v6=RECLAIMED_BEFORE_V6), found[0])
            if progress is not None and (done % PROGRESS_EVERY == 0 or done == total):
                progress("records", done, total)
