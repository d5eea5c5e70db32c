"""The ``scopes`` table: one row per scope (credential, model, caller), its generation
and its latest model snapshot (design §2, §5 fencing)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from relay.core.records import ScopeRow
from relay.core.scope import ScopeTargeting
from relay.storage.database import Database
from relay.storage.schema import in_batches, placeholders


class Scopes:
    def __init__(self, db: Database, wall: Callable[[], float]) -> None:
        self._db = db
        self._wall = wall  # the store's clock: when a scope was created

    def find_scope(self, digest: str) -> ScopeRow | None:
        with self._db.read("read a scope") as conn:
            row = conn.execute(
                "SELECT id, digest, generation, credential, model, caller FROM scopes "
                "WHERE digest = ?",
                (digest,),
            ).fetchone()
        return None if row is None else ScopeRow(*row)

    def scope_for(self, digest: str, targeting: ScopeTargeting) -> ScopeRow:
        """The scope with ``digest``, created (generation 1) if new; opens its own short
        transaction when called outside one."""
        found = self.find_scope(digest)
        if found is not None:
            return found
        if not self._db.in_transaction:
            with self._db.transaction():
                return self.scope_for(digest, targeting)
        with self._db.write("create a scope") as conn:
            conn.execute(
                "INSERT INTO scopes (digest, credential, model, caller, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (digest, targeting.credential, targeting.model, targeting.caller,
                 self._wall()),
            )  # fmt: skip
        created = self.find_scope(digest)
        assert created is not None
        return created

    def scopes_targeted(self, *, credential: str, model: str, caller: str | None) -> list[int]:
        """Ids of scopes fencing must advance: credential/model, and caller unless None."""
        sql = "SELECT id FROM scopes WHERE credential = ? AND model = ?"
        params: tuple[str, ...] = (credential, model)
        if caller is not None:
            sql, params = sql + " AND caller = ?", (*params, caller)
        with self._db.read("read scopes") as conn:
            return [row[0] for row in conn.execute(sql + " ORDER BY id", params)]

    def latest_snapshot(self, scope_id: int) -> str | None:
        with self._db.read("read a scope") as conn:
            row = conn.execute(
                "SELECT latest_snapshot FROM scopes WHERE id = ?", (scope_id,)
            ).fetchone()
        return None if row is None else row[0]

    def advance_generations(self, scope_ids: Iterable[int] | None = None) -> int:
        """Start a new generation in the given scopes (``None``: all); returns how many."""
        with self._db.write("advance generations") as conn:
            if scope_ids is None:
                return conn.execute("UPDATE scopes SET generation = generation + 1").rowcount
            changed = 0
            for batch in in_batches(dict.fromkeys(scope_ids)):
                changed += conn.execute(
                    "UPDATE scopes SET generation = generation + 1 "  # noqa: S608
                    f"WHERE id IN ({placeholders(len(batch))})",
                    batch,
                ).rowcount
            return changed
