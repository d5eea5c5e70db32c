"""Cache byte allowances (design §5, §9)."""

from __future__ import annotations

import pytest

from relay.core.resources import MIB, BudgetTooSmall, CacheBudget, CapacityLedger

DEFAULT = CacheBudget(
    memory_bytes=128 * MIB, max_entry_bytes=4 * MIB, max_replay_bytes=16 * MIB, max_concurrent=10
)


def test_defaults_match_the_spec() -> None:
    assert DEFAULT.hot_cache_bytes == 4 * MIB
    assert DEFAULT.shared_bytes == 36 * MIB
    assert DEFAULT.session_bytes == 92 * MIB
    assert DEFAULT.allowance(1000, 500) == 64 * 1024 + 8 * MIB + 3000


def test_ten_small_requests_with_150_kib_chains_fit() -> None:
    ledger = CapacityLedger(DEFAULT)
    leases = [ledger.try_acquire(50 * 1024) for _ in range(10)]
    assert all(lease is not None for lease in leases)
    assert all(ledger.try_grow(lease, 150 * 1024) for lease in leases if lease)
    assert ledger.try_acquire(10) is None  # the eleventh: concurrency
    for lease in leases:
        assert lease is not None
        ledger.release(lease)
        ledger.release(lease)  # idempotent
    assert (ledger.in_use, ledger.sessions) == (0, 0)


def test_large_histories_reduce_concurrency_and_replay_can_be_refused() -> None:
    ledger = CapacityLedger(DEFAULT)
    big = ledger.try_acquire(20 * MIB)  # 64 KiB + 8 MiB + 40 MiB
    assert big is not None
    second = ledger.try_acquire(20 * MIB)
    assert second is None  # would pass 92 MiB
    assert not ledger.try_grow(big, 30 * MIB)
    assert ledger.try_grow(big, 1 * MIB)


@pytest.mark.parametrize("memory", [1 * MIB, 33 * MIB])
def test_a_budget_that_cannot_fit_shared_work_and_one_session_is_refused(memory: int) -> None:
    budget = CacheBudget(memory, 4 * MIB, 16 * MIB, 10)
    with pytest.raises(BudgetTooSmall, match="REASONING_CACHE_MEMORY_BYTES"):
        budget.check()
