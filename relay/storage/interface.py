"""The replay store as the cache sees it: a ``typing.Protocol`` any backend implements.

The SQLite store (:class:`relay.storage.replay_store.ReasoningStore`) is the one backend
today; a second one (a shared database for several relays) plugs in here. The cache,
retention, disk safety and startup recovery are typed against :class:`ReplayStore`, so
they never see a connection, a cursor or an engine's error type:

- a transaction is a method (:meth:`ReplayStore.transaction`), a context manager that
  commits durably on exit and rolls back when the body raises; writes are only valid
  inside one, and transactions do not nest; one marked ``before_send`` is a commit a
  request waits for before it is forwarded, durable as any other, whose housekeeping (a
  WAL checkpoint) a backend may leave to a later commit;
- every failure leaving a method is a :class:`~relay.errors.StoreError` subclass whose
  message names no stored value (payloads are ciphertext, scope values credential
  fingerprints);
- rows come back as the core's value types (:mod:`relay.core.records`) and the plain
  dataclasses below.

The read-only diagnostics (:class:`StoreDiagnostics`) are part of the interface: the
admin socket, the cache API and the inspection snapshot read them through the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from relay.core.records import (
    MarkerKind,
    Observation,
    OversizedPayload,
    PriorPlan,
    ScopeRow,
    StoredPayload,
)
from relay.core.scope import ScopeTargeting

if TYPE_CHECKING:
    from relay.storage.aggregates import StoreAggregates
    from relay.storage.cleanup import CleanupResult
    from relay.storage.strict_store import StrictEntry, StrictPage, StrictStats


class IntentPhase(StrEnum):
    DISPATCH = "dispatch"  # forwarded upstream, output not yet committed
    DELIVERY = "delivery"  # observation committed, terminal output being delivered


@dataclass(frozen=True)
class IntentRow:
    """An unresolved generation; resolved intents are deleted. Recovery needs no more: it
    poisons the position whatever the plan was (the plan's blocks are pinned through
    ``dependencies`` while the intent lives)."""

    id: str
    scope_id: int
    phase: IntentPhase
    position: int
    start_digest: str
    created_at: float


@dataclass(frozen=True)
class RecordSummary:
    """What the cache API may show of one observation: sizes, prefixes, model, times."""

    id: int
    model: str
    snapshot: str | None
    position: int
    replayable: bool
    payload_bytes: int | None  # None: observed only, or the payload was reclaimed
    end_digest_prefix: str
    observed_at: float
    touched_at: float | None


class StrictStore(Protocol):
    """The strict providers' records (``ReplayStore.strict``), in the same store and the
    same transactions as the replay state."""

    def put(
        self, *, scope_digest: str, end_digest: str | None, tool_call_ids: Sequence[str],
        provider: str, model: str, reasoning: str, now: float, expires_at: float,
    ) -> StrictEntry: ...  # fmt: skip
    def by_end(self, scope_digest: str, end_digest: str) -> StrictEntry | None: ...
    def by_tool_call(self, scope_digest: str, call_id: str) -> StrictEntry | None: ...
    def get(self, entry_id: int) -> StrictEntry | None: ...
    def touch(self, entry_ids: Iterable[int], *, now: float, expires_at: float) -> None: ...
    def delete_expired(self, now: float) -> int: ...
    def page(
        self,
        *,
        provider: str | None = None,
        model: str | None = None,
        limit: int = 50,
        before_id: int | None = None,
    ) -> StrictPage: ...
    def stats(self, now: float) -> StrictStats: ...
    def delete(self, entry_id: int) -> bool: ...
    def delete_all(self) -> int: ...
    def delete_provider(self, provider: str) -> int: ...
    def delete_tool_call(self, call_id: str) -> int: ...


class PayloadReclaimer(Protocol):
    """Retention's reclamation (``ReplayStore.cleanup``): one transaction per run."""

    def eligible(self, cutoff: float) -> int: ...
    def reclaim(
        self, cutoff: float, *, limit: int = ..., scan: int = ..., now: float | None = None
    ) -> CleanupResult: ...


class StoreDiagnostics(Protocol):
    """Read-only views for the admin socket, the cache API and ``relay status`` (never a
    payload), and the online inspection copy: the store's pages into a SQLite file at
    ``target`` (a backend that cannot make one raises a ``StoreError`` that names the tool
    to use instead)."""

    def integrity_check(self) -> list[str]: ...
    def recent_records(self, *, model: str | None, limit: int) -> list[RecordSummary]: ...
    def aggregates(self, *, scan_rows: int) -> StoreAggregates: ...
    def stats(self) -> dict[str, int]: ...
    def source_bytes(self) -> int: ...
    def copy_for_inspection(
        self,
        target: Path,
        *,
        pages: int,
        wait_turn: Callable[[], None],
        stepped: Callable[[int, int], None],
    ) -> None: ...


class ReplayStore(StoreDiagnostics, Protocol):
    """The replay cache's persistent state (design §6), whatever holds it, with its
    diagnostics."""

    @property
    def secret(self) -> bytes:
        """The persistent cache-local secret that keys scope fingerprints."""
        ...

    @property
    def malformed_plans_seen(self) -> int: ...

    @property
    def strict(self) -> StrictStore: ...

    @property
    def cleanup(self) -> PayloadReclaimer: ...

    # --- lifecycle and transactions
    def transaction(self, *, before_send: bool = False) -> AbstractContextManager[None]: ...
    def checkpoint(self) -> None: ...
    def used_bytes(self) -> int: ...
    def close(self) -> None: ...

    # --- scopes
    def find_scope(self, digest: str) -> ScopeRow | None: ...
    def scope_for(self, digest: str, targeting: ScopeTargeting) -> ScopeRow: ...
    def scopes_targeted(self, *, credential: str, model: str, caller: str | None) -> list[int]: ...
    def latest_snapshot(self, scope_id: int) -> str | None: ...
    def advance_generations(self, scope_ids: Iterable[int] | None = None) -> int: ...

    # --- observations
    def observation(self, observation_id: int) -> Observation | None: ...
    def observations_at(self, scope_id: int, end_digest: str) -> list[Observation]: ...
    def observations_ending_at(
        self, scope_id: int, end_digests: Iterable[str]
    ) -> dict[str, list[Observation]]: ...
    def ends_with_records(self, scope_id: int, end_digests: Iterable[str]) -> set[str]: ...
    def repeats(
        self, scope_id: int, *, generation: int, position: int, start_digest: str,
        end_digest: str, envelope_fingerprint: str, payload_fingerprint: str,
        prior_plan: PriorPlan,
    ) -> list[int]: ...  # fmt: skip
    def conflicts_at(
        self, scope_id: int, end_digest: str, payload_fingerprint: str, prior_plan: PriorPlan
    ) -> bool: ...
    def generation_ends(
        self, scope_id: int, start_digest: str, end_digests: Iterable[str]
    ) -> set[str]: ...
    def lineage(self, scope_id: int, observation_id: int, limit: int) -> list[Observation]: ...
    def observations_by_id(
        self, scope_id: int, observation_ids: Iterable[int]
    ) -> list[Observation]: ...
    def snapshot_last_seen(self, scope_id: int, snapshot: str) -> float | None: ...
    def add_observation(
        self, *, scope_id: int, generation: int, position: int, start_digest: str,
        end_digest: str, envelope_fingerprint: str, payload_fingerprint: str,
        output_hash: str, prior_plan: PriorPlan, intent_id: str | None,
        snapshot: str | None, replayable: bool, now: float,
    ) -> Observation: ...  # fmt: skip
    def children_of(self, observation_id: int) -> list[int]: ...
    def has_retained_descendant(self, observation_id: int) -> bool: ...

    # --- payloads
    def load_payload(self, observation_id: int, *, max_bytes: int) -> StoredPayload | None: ...
    def load_payloads(
        self, observation_ids: Iterable[int], *, max_bytes: int
    ) -> dict[int, StoredPayload | OversizedPayload]: ...
    def put_payload(self, observation_id: int, output_json: str, now: float) -> None: ...
    def touch_payloads(self, observation_ids: Iterable[int], now: float) -> None: ...

    # --- markers
    def add_marker(
        self, scope_id: int, kind: MarkerKind, digest: str, position: int, now: float
    ) -> bool: ...
    def poisoned_starts(self, scope_id: int, start_digests: Iterable[str]) -> set[str]: ...
    def conflicted_ends(self, scope_id: int, end_digests: Iterable[str]) -> set[str]: ...
    def rejected_ends(self, scope_id: int, end_digests: Iterable[str]) -> set[str]: ...

    # --- intents and their pins
    def create_intent(
        self, intent_id: str, *, scope_id: int, position: int, start_digest: str, now: float
    ) -> None: ...
    def pin(self, intent_id: str, observation_ids: Iterable[int]) -> None: ...
    def set_intent_phase(
        self, intent_id: str, phase: IntentPhase | Literal["dispatch", "delivery"]
    ) -> bool: ...
    def delete_intent(self, intent_id: str) -> bool: ...
    def unresolved_intents_at(
        self, scope_id: int, start_digests: Iterable[str]
    ) -> dict[str, set[str]]: ...
    def unresolved_intents(self) -> list[IntentRow]: ...

    # --- small stored facts
    def meta(self, key: str) -> str | int | float | bytes | None: ...
    def set_meta(self, key: str, value: str | int | float | None) -> None: ...
