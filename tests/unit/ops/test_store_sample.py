"""The five-second cache of store aggregates (relay.ops.store_sample), on a fake clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.clock import ManualClock
from relay.ops.store_sample import TTL_S, StoreSampler
from relay.storage.replay_store import ReasoningStore


def test_aggregates_are_read_at_most_once_per_ttl(tmp_path: Path) -> None:
    clock = ManualClock()
    store = ReasoningStore.open(tmp_path / "cache.sqlite", clock=clock)
    try:
        sampler = StoreSampler(store, clock)
        first = sampler.sample()
        assert first is not None and sampler.reads == 1 and first.age_s == 0
        with store.transaction():
            store.set_meta("k", "v" * 5000)  # grows the file: a fresh read would see it
        clock.advance(TTL_S - 0.001)
        cached = sampler.sample()
        assert cached is not None and sampler.reads == 1
        assert cached.aggregates == first.aggregates and cached.age_s == pytest.approx(
            TTL_S - 0.001
        )
        clock.advance(0.001)
        fresh = sampler.sample()
        assert fresh is not None and sampler.reads == 2 and fresh.age_s == 0
        assert fresh.aggregates.wal_bytes > first.aggregates.wal_bytes
        assert fresh.sampled_wall == clock.wall()
    finally:
        store.close()


def test_no_store_no_sample() -> None:
    sampler = StoreSampler(None, ManualClock())
    assert sampler.sample() is None and sampler.reads == 0
