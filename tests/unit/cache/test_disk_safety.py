"""Safety writes on a real full volume (a size-limited tmpfs: real ENOSPC, root only): the
reserve makes room for one retry, a second failure latches, a latched store is refused,
and a store on a volume with no free byte left still opens."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.cache.disk_safety import DiskSafety, open_store
from relay.clock import ManualClock
from relay.core.disk_policy import Admission
from relay.errors import StoreLatched
from relay.storage import portable
from relay.storage.disk_guard import DiskGuard
from relay.storage.replay_store import ReasoningStore
from scenarios.faults.disk import TmpfsMount, integrity_check
from tests.support.tmpfs import size_limited_tmpfs

RESERVE = 256 * 1024
BIG = "y" * 200_000  # more frames than any WAL slack: the write needs new blocks


@pytest.fixture
def volume() -> Iterator[TmpfsMount]:
    with size_limited_tmpfs(2 << 20) as mount:
        yield mount


def big_write(store: ReasoningStore, key: str) -> None:
    with store.transaction():
        store.set_meta(key, BIG)


@pytest.mark.parametrize("preallocation", ["native", "without_posix_fallocate"])
def test_the_reserve_makes_room_once_then_the_cache_latches(
    volume: TmpfsMount, preallocation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if preallocation == "without_posix_fallocate":  # as on macOS: relay.storage.portable falls back
        monkeypatch.delattr(os, "posix_fallocate", raising=False)
    clock = ManualClock()
    guard = DiskGuard(volume.target / "cache.sqlite", RESERVE)
    store = open_store(guard, clock)
    safety = DiskSafety(store, guard, disk_bytes=1 << 30, clock=clock)
    try:
        assert guard.ensure_reserve()
        if preallocation != "native":
            assert guard.allocated_by in ("f_preallocate", "zeros")
        assert safety.refuse_payload(1000) is None
        volume.fill(leave_bytes=0)
        assert volume.free_bytes() == 0
        safety.write("first", lambda: big_write(store, "first"))  # ENOSPC, reserve, retry
        assert not guard.reserve.exists()
        assert safety.reserve_releases == 1
        assert not guard.guard.exists()
        assert store.meta("first") == BIG
        assert safety.refuse_payload(1000) is Admission.RESERVE_RELEASED  # no room to restore
        with pytest.raises(StoreLatched):
            safety.write("second", lambda: big_write(store, "second"))
        assert safety.latched and guard.guard.exists()
        assert store.meta("second") is None, "a failed safety write left part of itself"
        with pytest.raises(StoreLatched):
            safety.check()
    finally:
        store.close()
    volume.release()  # (a read-only check needs room for its -shm file)
    assert integrity_check(guard.db) == "ok"
    with pytest.raises(StoreLatched, match=r"\.guard exists"):
        open_store(guard, clock)


def test_zeros_on_a_full_volume_fail_cleanly(
    volume: TmpfsMount, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(portable, "FORCE_FALLBACKS", True)
    path = volume.target / "reserve"
    volume.fill(leave_bytes=RESERVE // 2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with pytest.raises(OSError) as full:
            portable.preallocate(fd, RESERVE)
    finally:
        os.close(fd)
    assert full.value.errno == errno.ENOSPC


def test_a_store_opens_on_a_volume_with_no_free_byte(volume: TmpfsMount) -> None:
    clock = ManualClock()
    guard = DiskGuard(volume.target / "cache.sqlite", RESERVE)
    store = open_store(guard, clock)
    with store.transaction():
        store.set_meta("kept", "value")
    store.close()
    assert guard.ensure_reserve()
    volume.fill(leave_bytes=0)
    # The startup checkpoint and write fit in the bounded WAL, or the reserve gives room.
    store = open_store(guard, clock)
    try:
        assert store.meta("kept") == "value"
        assert store.integrity_check() == ["ok"]
    finally:
        store.close()


def test_the_disk_limit_stops_admission_and_deletes_nothing(tmp_path: Path) -> None:
    clock = ManualClock()
    guard = DiskGuard(tmp_path / "cache.sqlite", RESERVE)
    store = open_store(guard, clock)
    try:
        assert guard.ensure_reserve()
        used = store.used_bytes()
        assert used > 0 and used % 4096 == 0
        roomy = DiskSafety(store, guard, disk_bytes=used + 10_000, clock=clock)
        assert roomy.refuse_payload(10_000) is None
        tight = DiskSafety(store, guard, disk_bytes=used + 9_999, clock=clock)
        assert tight.refuse_payload(10_000) is Admission.DISK_LIMIT
        assert tight.refused_payloads == 1
        assert store.used_bytes() == used, "a refusal must not touch the store"
    finally:
        store.close()
