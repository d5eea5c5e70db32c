"""The ``markers`` table: a scope's safety markers (poisoned starts, conflicted and
rejected ends), written once and kept forever (design §4)."""

from __future__ import annotations

from collections.abc import Iterable

from relay.core.records import MarkerKind
from relay.storage.database import Database
from relay.storage.schema import matching


class MarkerReads:
    """Both stores' marker gateways: which of some digests carry a marker of a kind, read
    by :meth:`_marked` in each store's dialect."""

    def _marked(self, scope_id: int, kind: MarkerKind, digests: Iterable[str]) -> set[str]:
        raise NotImplementedError

    def poisoned_starts(self, scope_id: int, start_digests: Iterable[str]) -> set[str]:
        return self._marked(scope_id, MarkerKind.START_POISON, start_digests)

    def conflicted_ends(self, scope_id: int, end_digests: Iterable[str]) -> set[str]:
        return self._marked(scope_id, MarkerKind.END_CONFLICT, end_digests)

    def rejected_ends(self, scope_id: int, end_digests: Iterable[str]) -> set[str]:
        return self._marked(scope_id, MarkerKind.END_REJECTED, end_digests)


class Markers(MarkerReads):
    def __init__(self, db: Database) -> None:
        self._db = db

    def add_marker(
        self, scope_id: int, kind: MarkerKind, digest: str, position: int, now: float
    ) -> bool:
        """Record a safety marker; ``False`` when it was already there (idempotent)."""
        with self._db.write("record a marker") as conn:
            return bool(
                conn.execute(
                    "INSERT OR IGNORE INTO markers (scope_id, kind, digest, position, "
                    "created_at) VALUES (?, ?, ?, ?, ?)",
                    (scope_id, MarkerKind(kind).value, digest, position, now),
                ).rowcount
            )

    def _marked(self, scope_id: int, kind: MarkerKind, digests: Iterable[str]) -> set[str]:
        with self._db.read("read markers") as conn:
            rows = matching(
                conn, "SELECT digest FROM markers WHERE scope_id = ? AND kind = ?",
                (scope_id, kind.value), "digest", digests,
            )  # fmt: skip
        return {row[0] for row in rows}
