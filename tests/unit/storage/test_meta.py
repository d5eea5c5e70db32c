"""The meta gateway (relay.storage.meta) and the diagnostics (relay.storage.diagnostics) against a real store."""

from __future__ import annotations

import pytest

from relay.storage.replay_store import ReasoningStore
from tests.support.store_rows import h, observe, scope_id

# --- meta and diagnostics ------------------------------------------------------------


def test_meta_values(store: ReasoningStore) -> None:
    assert store.meta("coverage-gap") is None
    with store.transaction():
        store.set_meta("coverage-gap", 1)
    assert store.meta("coverage-gap") == 1
    with store.transaction():
        store.set_meta("coverage-gap", None)
    assert store.meta("coverage-gap") is None
    with pytest.raises(ValueError, match="secret"), store.transaction():
        store.set_meta("secret", "x")
    assert store.meta("secret") == store.secret


def test_stats_and_integrity(store: ReasoningStore) -> None:
    assert store.stats() == {
        "scopes": 0, "observations": 0, "payloads": 0, "markers": 0, "dependencies": 0,
        "intents": 0, "payload_bytes": 0,
    }  # fmt: skip
    sid = scope_id(store)
    obs = observe(store, sid, end=h(1))
    with store.transaction():
        store.put_payload(obs.id, "[1]", 1.0)
    assert store.stats() == {
        "scopes": 1, "observations": 1, "payloads": 1, "markers": 0, "dependencies": 0,
        "intents": 0, "payload_bytes": 3,
    }  # fmt: skip
    assert store.integrity_check() == ["ok"]
