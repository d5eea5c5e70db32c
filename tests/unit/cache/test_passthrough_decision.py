"""ReplayCache.decide_passthrough: the cache's decision for a direct ``POST /v1/responses``
call (the passthrough pipeline's Begin). It never gets a session; its guard is the fence of
the scopes it may extend when the cache is on, the coverage gap (once) when it is off over
a store, and nothing when it is off with no store. Deciding writes nothing; the guard
writes (real SQLite stores in a temporary directory)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.cache.replay_cache import DIRECT_RESPONSES, ReplayCache
from relay.clock import ManualClock
from relay.core.disk_policy import MIN_RESERVE_BYTES
from relay.core.replay_header import PASSTHROUGH
from relay.errors import StoreError
from relay.settings.config import Config


def opened(path: Path, *, enabled: bool) -> ReplayCache:
    config = Config(
        reasoning_cache_enabled=enabled,
        reasoning_cache_path=path,
        reasoning_cache_reserve_bytes=MIN_RESERVE_BYTES,
    )
    return ReplayCache.open(
        config, ManualClock(), upstream_url="https://api.openai.com/v1/responses",
        upstream_credential="sk-test", relay_token="relay-token", new_id=lambda p: p + "1",
    )  # fmt: skip


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "reasoning-cache.sqlite"


@pytest.fixture
def caches() -> Iterator[list[ReplayCache]]:
    made: list[ReplayCache] = []
    yield made
    for cache in made:
        cache.close()


def test_on_the_guard_is_the_fence_written_only_when_performed(
    path: Path, caches: list[ReplayCache]
) -> None:
    cache = opened(path, enabled=True)
    caches.append(cache)
    began = cache.decide_passthrough("gpt-5", "alice", "req_1")
    assert (began.session, began.skipped, began.guard) == (None, PASSTHROUGH, "fence")
    assert cache.metrics.fenced == 0  # deciding wrote nothing
    began.write_guard()
    assert cache.metrics.fenced == 1
    assert cache.metrics.fences[DIRECT_RESPONSES] == 1
    assert cache.metrics.requests == 0  # not a request the cache could observe


def test_off_with_no_store_there_is_nothing_to_guard(path: Path, caches: list[ReplayCache]) -> None:
    cache = opened(path, enabled=False)
    caches.append(cache)
    assert cache.store is None
    began = cache.decide_passthrough("gpt-5", None, "req_1")
    assert (began.session, began.skipped, began.guard) == (None, PASSTHROUGH, None)
    began.write_guard()  # nothing to write
    assert not path.exists()


def test_off_over_a_store_the_guard_records_the_gap_once(
    path: Path, caches: list[ReplayCache]
) -> None:
    opened(path, enabled=True).close()  # a store exists
    cache = opened(path, enabled=False)
    caches.append(cache)
    began = cache.decide_passthrough("gpt-5", None, "req_1")
    recorded_before = cache.gap_recorded
    began.write_guard()
    assert (began.guard, recorded_before, cache.gap_recorded) == ("fence", False, True)
    assert cache.metrics.fenced == 0  # the gap covers it: no fence
    assert cache.decide_passthrough("gpt-5", None, "req_2").guard is None  # once per process


def test_a_fence_that_cannot_be_written_raises(path: Path) -> None:
    cache = opened(path, enabled=True)
    began = cache.decide_passthrough("gpt-5", None, "req_1")
    assert cache.store is not None
    cache.store.close()  # every write fails now
    with pytest.raises(StoreError):
        began.write_guard()
    assert cache.metrics.fenced == 0
