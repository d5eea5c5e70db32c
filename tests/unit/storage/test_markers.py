"""The markers gateway (relay.storage.markers) against a real store."""

from __future__ import annotations

import pytest

from relay.core.records import (
    MarkerKind,
)
from relay.storage.replay_store import ReasoningStore
from relay.storage.schema import (
    FEW,
)
from tests.support.store_rows import h, scope_id

# --- markers -------------------------------------------------------------------------


def test_markers_are_idempotent_and_kind_scoped(store: ReasoningStore) -> None:
    sid, other = scope_id(store), scope_id(store, h("b"))
    with store.transaction():
        assert store.add_marker(sid, MarkerKind.START_POISON, h(1), 1, 1.0)
        assert not store.add_marker(sid, MarkerKind.START_POISON, h(1), 1, 2.0)
        assert store.add_marker(sid, MarkerKind.END_CONFLICT, h(2), 1, 1.0)
        assert store.add_marker(other, MarkerKind.START_POISON, h(3), 1, 1.0)
    assert store.stats()["markers"] == 3
    assert store.poisoned_starts(sid, [h(1), h(2), h(3), h(1)]) == {h(1)}
    assert store.conflicted_ends(sid, [h(1), h(2), h(3)]) == {h(2)}
    assert store.poisoned_starts(other, [h(1), h(3)]) == {h(3)}
    assert store.poisoned_starts(sid, []) == set()


def test_marker_queries_are_batched(store: ReasoningStore) -> None:
    sid = scope_id(store)
    marked = {h(n) for n in range(0, 1300, 7)}
    with store.transaction():
        for digest in marked:
            store.add_marker(sid, MarkerKind.END_CONFLICT, digest, 3, 1.0)
    assert store.conflicted_ends(sid, (h(n) for n in range(1300))) == marked


@pytest.mark.parametrize("count", [0, 1, FEW, FEW + 1, 2 * FEW])
def test_markers_and_intents_read_whole_or_matched_agree(store: ReasoningStore, count: int) -> None:
    """A scope with at most FEW markers (open intents) is read whole, one with more is
    matched in IN lists: the answers are the same either way, and scoped."""
    sid, other = scope_id(store), scope_id(store, h("b"))
    present = [h(n) for n in range(count)]
    with store.transaction():
        for digest in present:
            store.add_marker(sid, MarkerKind.START_POISON, digest, 1, 1.0)
            store.create_intent(
                f"intent-{digest[-4:]}", scope_id=sid, position=1, start_digest=digest, now=1.0,
            )  # fmt: skip
        store.add_marker(other, MarkerKind.START_POISON, h(10_000), 1, 1.0)
        store.add_marker(sid, MarkerKind.END_CONFLICT, h(10_001), 1, 1.0)
    asked = [*present[::2], h(10_000), h(10_001), h(10_002)]
    assert store.poisoned_starts(sid, asked) == set(present[::2])
    assert store.unresolved_intents_at(sid, asked) == {
        digest: {f"intent-{digest[-4:]}"} for digest in present[::2]
    }
    assert store.unresolved_intents_at(other, asked) == {}


def test_markers_survive_generation_changes(store: ReasoningStore) -> None:
    sid = scope_id(store)
    with store.transaction():
        store.add_marker(sid, MarkerKind.START_POISON, h(1), 1, 1.0)
        store.advance_generations()
    assert store.poisoned_starts(sid, [h(1)]) == {h(1)}
