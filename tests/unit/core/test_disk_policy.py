"""Disk pressure decisions: the WAL bound, admission, reserve re-creation, retry/latch."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.core.disk_policy import (
    MAX_WAL_BYTES,
    MIN_RESERVE_BYTES,
    WAL_FRAME_HEADER,
    WAL_HEADER,
    Admission,
    AfterFailure,
    DiskState,
    WalPolicy,
    after_safety_failure,
    may_recreate_reserve,
    refuse_payload,
    wal_policy,
)

KIB, MIB = 1024, 1024 * 1024


@pytest.mark.parametrize(
    ("reserve", "page", "pages"),
    [
        (64 * KIB, 4096, 3),  # the minimum reserve: a checkpoint every few pages
        (64 * MIB, 4096, 1018),  # the default: within SQLite's own 4 MiB
        (1 * MIB, 4096, 63),
        (64 * KIB, 65536, 1),  # a page larger than the bound: still one
    ],
)
def test_wal_policy_examples(reserve: int, page: int, pages: int) -> None:
    policy = wal_policy(reserve, page)
    assert policy.autocheckpoint_pages == pages
    assert policy.journal_size_limit == WAL_HEADER + pages * (page + WAL_FRAME_HEADER)


@given(st.integers(MIN_RESERVE_BYTES, 1 << 34), st.sampled_from([512, 1024, 4096, 8192, 16384]))
def test_the_wal_fits_a_quarter_of_the_reserve(reserve: int, page: int) -> None:
    policy = wal_policy(reserve, page)
    assert policy.autocheckpoint_pages >= 1
    assert policy.wal_bytes <= max(reserve // 4, WAL_HEADER + page + WAL_FRAME_HEADER)
    assert policy.wal_bytes <= MAX_WAL_BYTES


WAL = WalPolicy(3, 16 * KIB)


@pytest.mark.parametrize(
    ("state", "payload", "expected"),
    [
        (DiskState(0, 10 * MIB, True), 10 * KIB, None),
        (DiskState(0, 10 * MIB, False), 10 * KIB, Admission.RESERVE_RELEASED),
        (DiskState(MIB - 10 * KIB, 10 * MIB, True), 10 * KIB, None),  # exactly at the limit
        (DiskState(MIB - 10 * KIB + 1, 10 * MIB, True), 10 * KIB, Admission.DISK_LIMIT),
        (DiskState(0, 36 * KIB, True), 10 * KIB, None),  # 2 x 10 KiB + 16 KiB
        (DiskState(0, 36 * KIB - 1, True), 10 * KIB, Admission.LOW_FREE_SPACE),
    ],
)
def test_refuse_payload(state: DiskState, payload: int, expected: Admission | None) -> None:
    assert refuse_payload(state, payload, disk_bytes=MIB, wal=WAL) is expected


@given(st.integers(0, 1 << 40), st.integers(0, 1 << 40), st.booleans(), st.integers(0, 1 << 30))
def test_an_admitted_payload_never_passes_the_limit_or_the_free_space(
    used: int, free: int, held: bool, payload: int
) -> None:
    if refuse_payload(DiskState(used, free, held), payload, disk_bytes=1 << 30, wal=WAL) is None:
        assert held
        assert used + payload <= 1 << 30
        assert free - 2 * payload >= WAL.wal_bytes


@pytest.mark.parametrize(
    ("free", "reserve", "ok"),
    [(128 * KIB, 64 * KIB, True), (128 * KIB - 1, 64 * KIB, False), (0, 64 * KIB, False)],
)
def test_may_recreate_reserve(free: int, reserve: int, ok: bool) -> None:
    assert may_recreate_reserve(free, reserve) is ok


@pytest.mark.parametrize(
    ("failures", "held", "step"),
    [
        (1, True, AfterFailure.RELEASE_AND_RETRY),
        (1, False, AfterFailure.RETRY),
        (2, True, AfterFailure.LATCH),
        (2, False, AfterFailure.LATCH),
    ],
)
def test_after_safety_failure(failures: int, held: bool, step: AfterFailure) -> None:
    assert after_safety_failure(failures, held) is step
