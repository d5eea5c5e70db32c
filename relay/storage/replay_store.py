"""The replay cache's SQLite store (design §6): :class:`ReasoningStore`, the
:class:`~relay.storage.interface.ReplayStore` the cache is typed against, over one
exclusively owned SQLite database.

It composes the pieces, each in its own module: the database (:mod:`relay.storage.
database`: opening, ownership lock, PRAGMAs, transactions, error translation), one gateway
per table (:mod:`~relay.storage.scopes`, :mod:`~relay.storage.observations`,
:mod:`~relay.storage.payloads`, :mod:`~relay.storage.markers`,
:mod:`~relay.storage.intents` with their pins, :mod:`~relay.storage.meta`), the
strict-provider records (``ReasoningStore.strict``, :mod:`relay.storage.strict_store`),
payload reclamation (``ReasoningStore.cleanup``, :mod:`relay.storage.cleanup`) and the
read-only views (:mod:`relay.storage.diagnostics`). All share the one connection, its
transactions and its error translation: every ``sqlite3`` error leaving here is a
:class:`~relay.errors.StoreError` that names no stored value.

Writes happen only inside :meth:`ReasoningStore.transaction`; a write method called
outside one raises ``RuntimeError``. Reads work inside or outside.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Literal

from relay.clock import Clock
from relay.core.disk_policy import DEFAULT_RESERVE_BYTES
from relay.core.identity import ScopeTargeting
from relay.core.records import (
    MarkerKind,
    Observation,
    OversizedPayload,
    PriorPlan,
    ScopeRow,
    StoredPayload,
)
from relay.storage.aggregates import StoreAggregates
from relay.storage.cleanup import PayloadCleanup
from relay.storage.database import SECRET_BYTES, Database, store_error
from relay.storage.diagnostics import Diagnostics
from relay.storage.intents import Intents
from relay.storage.interface import IntentPhase, IntentRow, RecordSummary
from relay.storage.markers import Markers
from relay.storage.meta import Meta
from relay.storage.observations import Observations
from relay.storage.payloads import Payloads
from relay.storage.scopes import Scopes
from relay.storage.strict_store import StrictEntries

__all__ = [
    "SECRET_BYTES",
    "IntentPhase",
    "IntentRow",
    "ReasoningStore",
    "RecordSummary",
    "store_error",
]


class ReasoningStore:
    """The replay cache's persistent state, owned exclusively by this process."""

    def __init__(self, db: Database, clock: Clock) -> None:
        """Use :meth:`open`."""
        self._db = db
        self._scopes = Scopes(db, clock.wall)
        self._observations = Observations(db)
        self._payloads = Payloads(db)
        self._markers = Markers(db)
        self._intents = Intents(db)
        self._meta = Meta(db)
        self._diagnostics = Diagnostics(db)
        # The strict-provider records (relay.strict), on this same connection.
        self.strict = StrictEntries(db.read, db.write, db.transaction)
        # Payload reclamation (relay.storage.cleanup), on this same connection.
        self.cleanup = PayloadCleanup(db.read, db.write, db.transaction, clock.wall)

    # --- lifecycle -------------------------------------------------------------------

    @staticmethod
    def exists(path: Path) -> bool:
        """Whether a store file is there (disabled startup must not create one)."""
        return path.exists()

    @classmethod
    def open(
        cls, path: Path, *, clock: Clock, reserve_bytes: int = DEFAULT_RESERVE_BYTES
    ) -> ReasoningStore:
        """Open (creating if needed) and take exclusive ownership of the store at ``path``
        (:meth:`relay.storage.database.Database.open`: :class:`~relay.errors.StoreLocked`
        when another process holds it, :class:`~relay.errors.StoreCorrupt` for a file that
        is not a usable reasoning cache, other ``StoreError``\\ s for I/O trouble)."""
        return cls(Database.open(path, clock=clock, reserve_bytes=reserve_bytes), clock)

    def checkpoint(self) -> None:
        self._db.checkpoint()

    def used_bytes(self) -> int:
        return self._db.used_bytes()

    def close(self) -> None:
        """Release the lock and the file; calling it again does nothing."""
        self._db.close()

    def __enter__(self) -> ReasoningStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def path(self) -> Path:
        return self._db.path

    @property
    def secret(self) -> bytes:
        """The persistent cache-local secret that keys scope fingerprints."""
        return self._db.secret

    @property
    def malformed_plans_seen(self) -> int:
        """Rows read since open whose stored plan was malformed (returned non-replayable)."""
        return self._observations.malformed_plans_seen

    @property
    def _conn(self) -> sqlite3.Connection | None:
        # For tests and live checks that tamper with rows or set PRAGMAs on the owner's
        # connection; product code goes through the gateways.
        return self._db.connection

    def _writer(self, action: str) -> AbstractContextManager[sqlite3.Connection]:
        # The same, for a live check's deliberate damage inside a transaction.
        return self._db.write(action)

    def transaction(self) -> AbstractContextManager[None]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``; ``ROLLBACK`` when the body raises."""
        return self._db.transaction()

    # --- scopes (relay.storage.scopes) -------------------------------------------------

    def find_scope(self, digest: str) -> ScopeRow | None:
        return self._scopes.find_scope(digest)

    def scope_for(self, digest: str, targeting: ScopeTargeting) -> ScopeRow:
        return self._scopes.scope_for(digest, targeting)

    def scopes_targeted(self, *, credential: str, model: str, caller: str | None) -> list[int]:
        return self._scopes.scopes_targeted(credential=credential, model=model, caller=caller)

    def latest_snapshot(self, scope_id: int) -> str | None:
        return self._scopes.latest_snapshot(scope_id)

    def advance_generations(self, scope_ids: Iterable[int] | None = None) -> int:
        return self._scopes.advance_generations(scope_ids)

    # --- observations (relay.storage.observations) -------------------------------------

    def observation(self, observation_id: int) -> Observation | None:
        return self._observations.observation(observation_id)

    def observations_at(self, scope_id: int, end_digest: str) -> list[Observation]:
        return self._observations.observations_at(scope_id, end_digest)

    def observations_ending_at(
        self, scope_id: int, end_digests: Iterable[str]
    ) -> dict[str, list[Observation]]:
        return self._observations.observations_ending_at(scope_id, end_digests)

    def ends_with_records(self, scope_id: int, end_digests: Iterable[str]) -> set[str]:
        return self._observations.ends_with_records(scope_id, end_digests)

    def repeats(
        self, scope_id: int, *, generation: int, position: int, start_digest: str,
        end_digest: str, envelope_fingerprint: str, payload_fingerprint: str,
        prior_plan: PriorPlan,
    ) -> list[int]:  # fmt: skip
        return self._observations.repeats(
            scope_id, generation=generation, position=position, start_digest=start_digest,
            end_digest=end_digest, envelope_fingerprint=envelope_fingerprint,
            payload_fingerprint=payload_fingerprint, prior_plan=prior_plan,
        )  # fmt: skip

    def conflicts_at(
        self, scope_id: int, end_digest: str, payload_fingerprint: str, prior_plan: PriorPlan
    ) -> bool:
        return self._observations.conflicts_at(
            scope_id, end_digest, payload_fingerprint, prior_plan
        )

    def observations_starting_at(self, scope_id: int, start_digest: str) -> list[Observation]:
        return self._observations.observations_starting_at(scope_id, start_digest)

    def lineage(self, scope_id: int, observation_id: int, limit: int) -> list[Observation]:
        return self._observations.lineage(scope_id, observation_id, limit)

    def snapshot_last_seen(self, scope_id: int, snapshot: str) -> float | None:
        return self._observations.snapshot_last_seen(scope_id, snapshot)

    def add_observation(
        self, *, scope_id: int, generation: int, position: int, start_digest: str,
        end_digest: str, envelope_fingerprint: str, payload_fingerprint: str,
        output_hash: str, prior_plan: PriorPlan, intent_id: str | None,
        snapshot: str | None, replayable: bool, now: float,
    ) -> Observation:  # fmt: skip
        return self._observations.add_observation(
            scope_id=scope_id, generation=generation, position=position,
            start_digest=start_digest, end_digest=end_digest,
            envelope_fingerprint=envelope_fingerprint, payload_fingerprint=payload_fingerprint,
            output_hash=output_hash, prior_plan=prior_plan, intent_id=intent_id,
            snapshot=snapshot, replayable=replayable, now=now,
        )  # fmt: skip

    def children_of(self, observation_id: int) -> list[int]:
        return self._observations.children_of(observation_id)

    def has_retained_descendant(self, observation_id: int) -> bool:
        return self._observations.has_retained_descendant(observation_id)

    # --- payloads (relay.storage.payloads) ---------------------------------------------

    def load_payload(self, observation_id: int, *, max_bytes: int) -> StoredPayload | None:
        return self._payloads.load_payload(observation_id, max_bytes=max_bytes)

    def load_payloads(
        self, observation_ids: Iterable[int], *, max_bytes: int
    ) -> dict[int, StoredPayload | OversizedPayload]:
        return self._payloads.load_payloads(observation_ids, max_bytes=max_bytes)

    def put_payload(self, observation_id: int, output_json: str, now: float) -> None:
        self._payloads.put_payload(observation_id, output_json, now)

    def touch_payloads(self, observation_ids: Iterable[int], now: float) -> None:
        self._payloads.touch_payloads(observation_ids, now)

    # --- markers (relay.storage.markers) -----------------------------------------------

    def add_marker(
        self, scope_id: int, kind: MarkerKind, digest: str, position: int, now: float
    ) -> bool:
        return self._markers.add_marker(scope_id, kind, digest, position, now)

    def poisoned_starts(self, scope_id: int, start_digests: Iterable[str]) -> set[str]:
        return self._markers.poisoned_starts(scope_id, start_digests)

    def conflicted_ends(self, scope_id: int, end_digests: Iterable[str]) -> set[str]:
        return self._markers.conflicted_ends(scope_id, end_digests)

    def rejected_ends(self, scope_id: int, end_digests: Iterable[str]) -> set[str]:
        return self._markers.rejected_ends(scope_id, end_digests)

    # --- intents and pins (relay.storage.intents) --------------------------------------

    def create_intent(
        self, intent_id: str, *, scope_id: int, position: int, start_digest: str, now: float
    ) -> None:
        self._intents.create_intent(
            intent_id, scope_id=scope_id, position=position, start_digest=start_digest, now=now
        )

    def pin(self, intent_id: str, observation_ids: Iterable[int]) -> None:
        self._intents.pin(intent_id, observation_ids)

    def set_intent_phase(
        self, intent_id: str, phase: IntentPhase | Literal["dispatch", "delivery"]
    ) -> bool:
        return self._intents.set_intent_phase(intent_id, phase)

    def delete_intent(self, intent_id: str) -> bool:
        return self._intents.delete_intent(intent_id)

    def unresolved_intents_at(
        self, scope_id: int, start_digests: Iterable[str]
    ) -> dict[str, set[str]]:
        return self._intents.unresolved_intents_at(scope_id, start_digests)

    def unresolved_intents(self) -> list[IntentRow]:
        return self._intents.unresolved_intents()

    # --- meta (relay.storage.meta) -----------------------------------------------------

    def meta(self, key: str) -> str | int | float | bytes | None:
        return self._meta.meta(key)

    def set_meta(self, key: str, value: str | int | float | None) -> None:
        self._meta.set_meta(key, value)

    # --- diagnostics (relay.storage.diagnostics) ---------------------------------------

    def integrity_check(self) -> list[str]:
        return self._diagnostics.integrity_check()

    def recent_records(self, *, model: str | None, limit: int) -> list[RecordSummary]:
        return self._diagnostics.recent_records(model=model, limit=limit)

    def aggregates(self, *, scan_rows: int) -> StoreAggregates:
        return self._diagnostics.aggregates(scan_rows=scan_rows)

    def source_bytes(self) -> int:
        return self._diagnostics.source_bytes()

    def copy_for_inspection(
        self,
        target: Path,
        *,
        pages: int,
        wait_turn: Callable[[], None],
        stepped: Callable[[int, int], None],
    ) -> None:
        self._diagnostics.copy_for_inspection(
            target, pages=pages, wait_turn=wait_turn, stepped=stepped
        )

    def stats(self) -> dict[str, int]:
        return self._diagnostics.stats()
