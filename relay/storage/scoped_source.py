"""The planner's view of a store (:class:`relay.core.planner.RecordSource`), bound to one
scope: any :class:`~relay.storage.interface.ReplayStore` backend serves the planner
through it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from relay.core.records import Observation, OversizedPayload, StoredPayload
from relay.storage.interface import ReplayStore


class ScopedSource:
    """The planner's view of the store, bound to one scope."""

    def __init__(self, store: ReplayStore, scope_id: int) -> None:
        self._store = store
        self._scope_id = scope_id

    def observations_ending_at(
        self, end_digests: Iterable[str]
    ) -> Mapping[str, Sequence[Observation]]:
        return self._store.observations_ending_at(self._scope_id, end_digests)

    def ends_with_records(self, end_digests: Iterable[str]) -> set[str]:
        return self._store.ends_with_records(self._scope_id, end_digests)

    def lineage(self, observation_id: int, limit: int) -> Sequence[Observation]:
        return self._store.lineage(self._scope_id, observation_id, limit)

    def observations_by_id(self, observation_ids: Iterable[int]) -> Sequence[Observation]:
        return self._store.observations_by_id(self._scope_id, observation_ids)

    def poisoned_starts(self, start_digests: Iterable[str]) -> set[str]:
        return self._store.poisoned_starts(self._scope_id, start_digests)

    def conflicted_ends(self, end_digests: Iterable[str]) -> set[str]:
        return self._store.conflicted_ends(self._scope_id, end_digests)

    def rejected_ends(self, end_digests: Iterable[str]) -> set[str]:
        return self._store.rejected_ends(self._scope_id, end_digests)

    def unresolved_intents_at(self, start_digests: Iterable[str]) -> Mapping[str, set[str]]:
        return self._store.unresolved_intents_at(self._scope_id, start_digests)

    def latest_snapshot(self) -> str | None:
        return self._store.latest_snapshot(self._scope_id)

    def snapshot_last_seen(self, snapshot: str) -> float | None:
        return self._store.snapshot_last_seen(self._scope_id, snapshot)

    def load_payloads(
        self, observation_ids: Iterable[int], *, max_bytes: int
    ) -> Mapping[int, StoredPayload | OversizedPayload]:
        return self._store.load_payloads(observation_ids, max_bytes=max_bytes)
