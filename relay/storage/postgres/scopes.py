"""The ``scopes`` table on the shared store: one row per scope (credential, model,
caller), its generation and its latest model snapshot (design §2, §5 fencing, §22). A
scope's row is also its conversation's lock (:meth:`Database.lock_scope`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from relay.core.records import ScopeRow
from relay.core.scope import ScopeTargeting
from relay.storage.postgres.database import Database

_FIND_SCOPE: Final = (
    "SELECT id, digest, generation, credential, model, caller FROM scopes WHERE digest = %s"
)


class Scopes:
    def __init__(self, db: Database, wall: Callable[[], float]) -> None:
        self._db = db
        self._wall = wall  # the store's clock: when a scope was created

    def find_scope(self, digest: str) -> ScopeRow | None:
        """The scope with ``digest``; locked when inside a transaction."""
        db = self._db
        with db.read("read a scope") as conn:
            sql = _FIND_SCOPE + (" FOR UPDATE" if db.in_transaction else "")
            row = conn.execute(sql.encode(), (digest,)).fetchone()
        if row is None:
            return None
        db.note_locked([row[0]])
        return ScopeRow(*row)

    def scope_for(self, digest: str, targeting: ScopeTargeting) -> ScopeRow:
        """The scope with ``digest``, created (generation 1) if new, and locked when inside
        a transaction; opens its own short transaction when called outside one."""
        if not self._db.in_transaction:
            with self._db.transaction():
                return self.scope_for(digest, targeting)
        with self._db.write("create a scope") as conn:
            conn.execute(
                "INSERT INTO scopes (digest, credential, model, caller, created_at) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (digest) DO NOTHING",
                (digest, targeting.credential, targeting.model, targeting.caller,
                 self._wall()),
            )  # fmt: skip
        found = self.find_scope(digest)
        assert found is not None
        return found

    def scopes_targeted(self, *, credential: str, model: str, caller: str | None) -> list[int]:
        """Ids of scopes fencing must advance (locked, in id order, inside a transaction)."""
        db = self._db
        sql = "SELECT id FROM scopes WHERE credential = %s AND model = %s"
        params: tuple[str, ...] = (credential, model)
        if caller is not None:
            sql, params = sql + " AND caller = %s", (*params, caller)
        sql += " ORDER BY id" + (" FOR UPDATE" if db.in_transaction else "")
        with db.read("read scopes") as conn:
            ids = [row[0] for row in conn.execute(sql.encode(), params)]
        db.note_locked(ids)
        return ids

    def latest_snapshot(self, scope_id: int) -> str | None:
        with self._db.scoped(scope_id, "read a scope") as conn:
            row = conn.execute(
                "SELECT latest_snapshot FROM scopes WHERE id = %s", (scope_id,)
            ).fetchone()
        return None if row is None else row[0]

    def advance_generations(self, scope_ids: Iterable[int] | None = None) -> int:
        """Start a new generation in the given scopes (``None``: all); returns how many.
        Their rows are locked in id order first (:meth:`Database.lock_scopes`)."""
        with self._db.write("advance generations") as conn:
            ids = self._db.lock_scopes(conn, scope_ids)
            if scope_ids is None:
                cursor = conn.execute("UPDATE scopes SET generation = generation + 1")
            else:
                cursor = conn.execute(
                    "UPDATE scopes SET generation = generation + 1 WHERE id = ANY(%s)", (ids,)
                )
            return cursor.rowcount
