"""The ``intents`` table and its pins (``dependencies``) on the shared store: a
generation dispatched and not yet resolved, owned by this instance's lease (design §22,
5), and the observations its plan keeps from cleanup while it lives."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

from relay.errors import LeaseLapsed
from relay.storage.interface import IntentPhase, IntentRow
from relay.storage.postgres.database import Database


class Intents:
    def __init__(self, db: Database, instance: Callable[[], str]) -> None:
        self._db = db
        self._instance = instance  # this process's lease (a new one after a lapse)

    def create_intent(
        self, intent_id: str, *, scope_id: int, position: int, start_digest: str, now: float
    ) -> None:
        """Record a generation about to be dispatched, owned by this instance's lease: an
        insert that finds the lease lapsed (by the database's clock) fails with
        :class:`LeaseLapsed` before anything is forwarded."""
        with self._db.write("record an intent") as conn:
            self._db.lock_scope(conn, scope_id)
            cursor = conn.execute(
                "INSERT INTO intents (id, scope_id, instance_id, phase, position, "
                "start_digest, created_at) SELECT %s, %s, id, %s, %s, %s, %s FROM instances "
                "WHERE id = %s AND expires_at > clock_timestamp() FOR KEY SHARE",
                (intent_id, scope_id, IntentPhase.DISPATCH.value, position, start_digest,
                 now, self._instance()),
            )  # fmt: skip
            if cursor.rowcount != 1:
                raise LeaseLapsed(
                    f"reasoning cache {self._db.url}: this relay's lease lapsed before it "
                    "could record a dispatch; it registers again as a new instance"
                )

    def pin(self, intent_id: str, observation_ids: Iterable[int]) -> None:
        """One statement for the whole plan (an array, not a row per block)."""
        ids = list(dict.fromkeys(observation_ids))
        if not ids:
            return
        with self._db.write("pin dependencies") as conn:
            conn.execute(
                "INSERT INTO dependencies (intent_id, ancestor_id) "
                "SELECT %s, unnest(%s::bigint[]) ON CONFLICT DO NOTHING",
                (intent_id, ids),
            )

    def set_intent_phase(
        self, intent_id: str, phase: IntentPhase | Literal["dispatch", "delivery"]
    ) -> bool:
        with self._db.write("update an intent") as conn:
            cursor = conn.execute(
                "UPDATE intents SET phase = %s WHERE id = %s", (IntentPhase(phase).value, intent_id)
            )
            return bool(cursor.rowcount)

    def delete_intent(self, intent_id: str) -> bool:
        with self._db.write("delete an intent") as conn:
            return bool(conn.execute("DELETE FROM intents WHERE id = %s", (intent_id,)).rowcount)

    def unresolved_intents_at(
        self, scope_id: int, start_digests: Iterable[str]
    ) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        wanted = list(dict.fromkeys(start_digests))
        if not wanted:
            return found
        with self._db.scoped(scope_id, "read intents") as conn:
            rows = conn.execute(
                "SELECT start_digest, id FROM intents WHERE scope_id = %s "
                "AND start_digest = ANY(%s)",
                (scope_id, wanted),
            ).fetchall()
        for start, intent_id in rows:
            found.setdefault(start, set()).add(intent_id)
        return found

    def unresolved_intents(self) -> list[IntentRow]:
        """Every open intent of every instance, oldest first (fencing poisons those of its
        scopes; lease recovery, not this, decides whose intents are abandoned)."""
        with self._db.read("read intents") as conn:
            rows = conn.execute(
                "SELECT id, scope_id, phase, position, start_digest, created_at FROM intents "
                "ORDER BY created_at, id"
            ).fetchall()
        return [
            IntentRow(id_, scope_id, IntentPhase(phase), position, start, created)
            for id_, scope_id, phase, position, start, created in rows
        ]
