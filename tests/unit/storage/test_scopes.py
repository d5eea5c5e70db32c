"""The scopes gateway (relay.storage.scopes) against a real store."""

from __future__ import annotations

import pytest

from relay.clock import ManualClock
from relay.core.scope import ScopeTargeting
from relay.storage.replay_store import ReasoningStore
from tests.support.store_rows import TARGET, conn_of, h, scope_id

# --- scopes ------------------------------------------------------------------------------


def test_scope_for_creates_once(store: ReasoningStore, clock: ManualClock) -> None:
    assert store.find_scope(h("a")) is None
    created = store.scope_for(h("a"), TARGET)  # opens its own transaction
    assert (created.digest, created.generation, created.model) == (h("a"), 1, "gpt-5")
    assert created.credential == TARGET.credential
    assert created.caller is None
    clock.advance(10)
    assert store.scope_for(h("a"), TARGET) == created
    with store.transaction():
        other = store.scope_for(h("b"), ScopeTargeting("d" * 64, "gpt-5", "u" * 64))
    assert other.id != created.id
    assert other.caller == "u" * 64
    created_at = conn_of(store).execute("SELECT created_at FROM scopes ORDER BY id").fetchall()
    assert created_at == [(clock.wall() - 10,), (clock.wall(),)]


def test_scopes_targeted_for_fencing(store: ReasoningStore) -> None:
    a = store.scope_for(h(1), ScopeTargeting("c" * 64, "gpt-5", "u" * 64)).id
    b = store.scope_for(h(2), ScopeTargeting("c" * 64, "gpt-5", None)).id
    store.scope_for(h(3), ScopeTargeting("c" * 64, "gpt-4", "u" * 64))
    store.scope_for(h(4), ScopeTargeting("d" * 64, "gpt-5", "u" * 64))
    assert store.scopes_targeted(credential="c" * 64, model="gpt-5", caller="u" * 64) == [a]
    assert store.scopes_targeted(credential="c" * 64, model="gpt-5", caller=None) == [a, b]


@pytest.mark.parametrize(
    ("selected", "expected"),
    [(None, {1: 2, 2: 2, 3: 2}), ([1, 3, 3], {1: 2, 2: 1, 3: 2}), ([], {1: 1, 2: 1, 3: 1})],
)
def test_advance_generations(
    store: ReasoningStore, selected: list[int] | None, expected: dict[int, int]
) -> None:
    ids = [scope_id(store, h(n)) for n in (1, 2, 3)]
    assert ids == [1, 2, 3]
    with store.transaction():
        changed = store.advance_generations(selected)
    assert changed == sum(g - 1 for g in expected.values())
    assert {n: store.scope_for(h(n), TARGET).generation for n in ids} == expected


def test_advance_many_generations_in_chunks(store: ReasoningStore) -> None:
    with store.transaction():
        ids = [store.scope_for(h(n), TARGET).id for n in range(1, 1202)]
        assert store.advance_generations(ids) == 1201
