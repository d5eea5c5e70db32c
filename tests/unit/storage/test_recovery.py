"""Startup recovery, coverage gaps and fencing over a real SQLite store."""

from __future__ import annotations

import pytest

from relay.core.scope import ScopeTargeting
from relay.storage.recovery import (
    COVERAGE_GAP_KEY,
    fence,
    open_disabled,
    open_enabled,
    record_gap,
    recover_intents,
)
from relay.storage.replay_store import ReasoningStore


def h(n: int | str) -> str:
    return f"{n}".rjust(64, "0")


def scope(store: ReasoningStore, digest: str, *, model: str = "gpt-5", caller: str | None = None,
          credential: str = "cred-a") -> int:  # fmt: skip
    return store.scope_for(digest, ScopeTargeting(credential, model, caller)).id


def intent(store: ReasoningStore, scope_id: int, intent_id: str, start: str, position: int) -> None:
    with store.transaction():
        store.create_intent(
            intent_id, scope_id=scope_id, position=position, start_digest=start, now=1.0
        )


def generation(store: ReasoningStore, scope_id: int) -> int:
    rows = [s for s in (store.find_scope(h(d)) for d in "abcd") if s and s.id == scope_id]
    return rows[0].generation


def test_recovery_poisons_and_removes_every_unresolved_intent(store: ReasoningStore) -> None:
    a = scope(store, h("a"))
    intent(store, a, "i1", h(1), 1)
    intent(store, a, "i2", h(3), 3)
    with store.transaction():
        assert recover_intents(store, 5.0) == 2
    assert store.unresolved_intents() == []
    assert store.poisoned_starts(a, [h(1), h(3), h(5)]) == {h(1), h(3)}


def test_enabled_open_consumes_a_gap_once(store: ReasoningStore) -> None:
    a = scope(store, h("a"))
    assert open_enabled(store, 1.0).gap_consumed is False
    assert generation(store, a) == 1  # a continuously enabled restart rotates nothing
    intent(store, a, "i1", h(1), 1)
    assert open_disabled(store, 2.0) == 1
    assert store.meta(COVERAGE_GAP_KEY) is None  # a disabled open alone is no gap
    assert open_enabled(store, 2.5).gap_consumed is False
    assert generation(store, a) == 1
    assert store.poisoned_starts(a, [h(1)]) == {h(1)}  # but it did recover
    record_gap(store)
    assert store.meta(COVERAGE_GAP_KEY) is not None
    report = open_enabled(store, 3.0)
    assert (report.gap_consumed, report.generations_advanced) == (True, 1)
    assert generation(store, a) == 2
    assert store.meta(COVERAGE_GAP_KEY) is None
    assert open_enabled(store, 4.0).gap_consumed is False
    assert generation(store, a) == 2
    assert store.poisoned_starts(a, [h(1)]) == {h(1)}  # markers survive generations


@pytest.mark.parametrize(
    ("caller", "fenced"),
    [
        pytest.param("alice", {"a"}, id="with-caller-only-that-caller"),
        pytest.param(None, {"a", "b", "c"}, id="without-caller-every-caller"),
    ],
)
def test_fence_targets_credential_model_and_caller(
    store: ReasoningStore, caller: str | None, fenced: set[str]
) -> None:
    ids = {
        "a": scope(store, h("a"), caller="alice"),
        "b": scope(store, h("b"), caller="bob"),
        "c": scope(store, h("c")),
        "d": scope(store, h("d"), model="gpt-5-mini"),
    }
    scope(store, h("e"), credential="cred-b")
    for name, sid in ids.items():
        intent(store, sid, f"i-{name}", h(name), 2)
    assert fence(store, ScopeTargeting("cred-a", "gpt-5", caller), 9.0) == len(fenced)
    for name, sid in ids.items():
        hit = name in fenced
        assert generation(store, sid) == (2 if hit else 1), name
        assert store.poisoned_starts(sid, [h(name)]) == ({h(name)} if hit else set()), name
    assert len(store.unresolved_intents()) == 4  # live sessions keep their intents
