"""Cache byte allowances (design §5, §9)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


@pytest.mark.parametrize(
    ("memory", "entry", "configured", "effective"),
    [
        (128 * MIB, 4 * MIB, 10, 10),  # the defaults: 92 MiB fits 11 sessions of 8 MiB + 64 KiB
        (128 * MIB, 4 * MIB, 100, 11),
        (128 * MIB, 64 * 1024, 100, 100),  # small entries: 192 KiB a session
        (2048 * MIB, 4 * MIB, 100, 100),
        (128 * MIB, 4 * MIB, 0, 0),
        (36 * MIB + 64 * 1024, 4 * MIB, 10, 0),  # room for no session at all
    ],
)
def test_the_effective_concurrency_is_what_the_budget_fits(
    memory: int, entry: int, configured: int, effective: int
) -> None:
    budget = CacheBudget(memory, entry, 16 * MIB, configured)
    assert budget.effective_concurrent == effective
    ledger = CapacityLedger(budget)
    leases = [ledger.try_acquire(0) for _ in range(configured + 1)]
    assert sum(lease is not None for lease in leases) == effective  # exactly that many admitted
    warning = budget.concurrency_warning()
    assert (warning is None) == (effective == configured)


def test_the_warning_names_the_settings_and_a_budget_that_fits() -> None:
    budget = CacheBudget(128 * MIB, 4 * MIB, 16 * MIB, 100)
    warning = budget.concurrency_warning()
    assert warning is not None
    needed = budget.memory_for(100)
    assert warning == (
        "REASONING_CACHE_MAX_CONCURRENT=100 cannot be reached: the memory budget fits 11 "
        "cache sessions (each reserves 64 KiB + 2 x REASONING_CACHE_MAX_ENTRY_BYTES=4194304 "
        f"up front); raise REASONING_CACHE_MEMORY_BYTES to at least {needed} or lower "
        "REASONING_CACHE_MAX_ENTRY_BYTES"
    )
    raised = CacheBudget(needed, 4 * MIB, 16 * MIB, 100)
    assert raised.effective_concurrent == 100 and raised.concurrency_warning() is None


@given(
    memory=st.integers(1 * MIB, 4096 * MIB),
    entry=st.integers(64 * 1024, 64 * MIB),
    replay=st.integers(64 * 1024, 64 * MIB),
    configured=st.integers(0, 500),
)
def test_memory_for_always_fits_what_it_is_asked_for(
    memory: int, entry: int, replay: int, configured: int
) -> None:
    budget = CacheBudget(memory, entry, replay, configured)
    assert budget.effective_concurrent <= configured
    raised = CacheBudget(budget.memory_for(configured), entry, replay, configured)
    assert raised.effective_concurrent == configured
