"""The ``markers`` table on the shared store: a scope's safety markers (poisoned starts,
conflicted and rejected ends), written once and kept forever (design §4), read and
written under the scope's lock."""

from __future__ import annotations

from collections.abc import Iterable

from relay.core.records import MarkerKind
from relay.storage.markers import MarkerReads
from relay.storage.postgres.database import Database


class Markers(MarkerReads):
    def __init__(self, db: Database) -> None:
        self._db = db

    def add_marker(
        self, scope_id: int, kind: MarkerKind, digest: str, position: int, now: float
    ) -> bool:
        """Record a safety marker; ``False`` when it was already there (idempotent)."""
        with self._db.write("record a marker") as conn:
            self._db.lock_scope(conn, scope_id)
            cursor = conn.execute(
                "INSERT INTO markers (scope_id, kind, digest, position, created_at) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (scope_id, MarkerKind(kind).value, digest, position, now),
            )
            return bool(cursor.rowcount)

    def _marked(self, scope_id: int, kind: MarkerKind, digests: Iterable[str]) -> set[str]:
        wanted = list(dict.fromkeys(digests))
        if not wanted:
            return set()
        with self._db.scoped(scope_id, "read markers") as conn:
            rows = conn.execute(
                "SELECT digest FROM markers WHERE scope_id = %s AND kind = %s AND digest = ANY(%s)",
                (scope_id, kind.value, wanted),
            )
            return {row[0] for row in rows}
