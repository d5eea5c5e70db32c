"""The ``intents`` table and its pins (``dependencies``): a generation dispatched and not
yet resolved, and the observations its plan keeps from cleanup while it lives."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Literal

from relay.storage.database import Database
from relay.storage.interface import IntentPhase, IntentRow
from relay.storage.schema import IN_CHUNK, in_batches, matching

# Rows per multi-row pin INSERT: the intent id is bound once (?1), each row adds one
# parameter, so a statement stays under IN_CHUNK parameters like every IN list.
PIN_ROWS: Final = IN_CHUNK - 1
_SELECT_INTENTS: Final = """SELECT id, scope_id, phase, position, start_digest, created_at
    FROM intents ORDER BY created_at, id"""


class Intents:
    def __init__(self, db: Database) -> None:
        self._db = db

    def create_intent(
        self, intent_id: str, *, scope_id: int, position: int, start_digest: str, now: float
    ) -> None:
        """Record a generation about to be dispatched (phase ``dispatch``)."""
        with self._db.write("record an intent") as conn:
            conn.execute(
                "INSERT INTO intents (id, scope_id, phase, position, start_digest, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (intent_id, scope_id, IntentPhase.DISPATCH.value, position, start_digest, now),
            )

    def pin(self, intent_id: str, observation_ids: Iterable[int]) -> None:
        """Keep these observations' payloads from cleanup while the intent lives: one
        statement per :data:`PIN_ROWS` blocks, not one per block (a long plan pins
        hundreds)."""
        with self._db.write("pin dependencies") as conn:
            for batch in in_batches(dict.fromkeys(observation_ids), PIN_ROWS):
                conn.execute(
                    "INSERT OR IGNORE INTO dependencies (intent_id, ancestor_id) "  # noqa: S608
                    f"VALUES {', '.join(f'(?1, ?{n})' for n in range(2, len(batch) + 2))}",
                    (intent_id, *batch),
                )

    def set_intent_phase(
        self, intent_id: str, phase: IntentPhase | Literal["dispatch", "delivery"]
    ) -> bool:
        """``False`` when the intent does not exist."""
        with self._db.write("update an intent") as conn:
            return bool(
                conn.execute(
                    "UPDATE intents SET phase = ? WHERE id = ?",
                    (IntentPhase(phase).value, intent_id),
                ).rowcount
            )

    def delete_intent(self, intent_id: str) -> bool:
        """Resolve an intent; its pins go with it. ``False`` when it was already gone."""
        with self._db.write("delete an intent") as conn:
            return bool(conn.execute("DELETE FROM intents WHERE id = ?", (intent_id,)).rowcount)

    def unresolved_intents_at(
        self, scope_id: int, start_digests: Iterable[str]
    ) -> dict[str, set[str]]:
        """The ids of the intents still open at each of ``start_digests`` that has any."""
        found: dict[str, set[str]] = {}
        with self._db.read("read intents") as conn:
            rows = matching(
                conn, "SELECT start_digest, id FROM intents WHERE scope_id = ?",
                (scope_id,), "start_digest", start_digests,
            )  # fmt: skip
        for start, intent_id in rows:
            found.setdefault(start, set()).add(intent_id)
        return found

    def unresolved_intents(self) -> list[IntentRow]:
        """Every intent still in the table, oldest first (startup recovery poisons them)."""
        with self._db.read("read intents") as conn:
            rows = conn.execute(_SELECT_INTENTS).fetchall()
        return [
            IntentRow(id_, scope_id, IntentPhase(phase), position, start, created)
            for id_, scope_id, phase, position, start, created in rows
        ]
