"""The reserve file (real blocks), the .guard latch, and the store's WAL discipline."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from relay.clock import ManualClock
from relay.core.disk_policy import MIN_RESERVE_BYTES, wal_policy
from relay.errors import StoreLatched
from relay.storage.disk_guard import DiskGuard, guard_path, refuse_if_latched
from relay.storage.replay_store import ReasoningStore


def allocated(path: Path) -> int:
    return path.stat().st_blocks * 512


def test_the_reserve_is_physically_allocated(tmp_path: Path) -> None:
    guard = DiskGuard(tmp_path / "cache.sqlite", 256 * 1024)
    assert not guard.reserve_held
    assert guard.ensure_reserve()
    assert guard.reserve.stat().st_size == 256 * 1024
    assert allocated(guard.reserve) >= 256 * 1024, "a sparse reserve frees nothing"
    assert guard.reserve.stat().st_mode & 0o777 == 0o600
    assert guard.release_reserve()
    assert not guard.reserve.exists() and not guard.reserve_held
    assert not guard.release_reserve(), "nothing left to release"


def test_a_sparse_or_short_reserve_is_allocated_again(tmp_path: Path) -> None:
    guard = DiskGuard(tmp_path / "cache.sqlite", 256 * 1024)
    with guard.reserve.open("wb") as sparse:
        sparse.truncate(256 * 1024)  # the right size, no blocks
    assert allocated(guard.reserve) < 256 * 1024
    assert not guard.reserve_held
    assert guard.ensure_reserve()
    assert allocated(guard.reserve) >= 256 * 1024
    DiskGuard(guard.db, MIN_RESERVE_BYTES).ensure_reserve()  # a smaller setting: replaced
    assert guard.reserve.stat().st_size == MIN_RESERVE_BYTES


def test_the_latch_writes_a_guard_and_blocks_reuse(tmp_path: Path) -> None:
    db = tmp_path / "cache.sqlite"
    refuse_if_latched(db)  # no guard: nothing to refuse
    guard = DiskGuard(db, MIN_RESERVE_BYTES)
    assert guard.latch("dispatch intent", "SQLITE_FULL", 1_700_000_000.0)
    assert guard.latched and guard_path(db).exists()
    with pytest.raises(StoreLatched) as refused:
        refuse_if_latched(db)
    message = str(refused.value)
    assert "\n" not in message
    assert f"{db}.guard exists" in message
    assert "dispatch intent failed with SQLITE_FULL" in message
    assert "free space on" in message and f"delete {db}.guard" in message
    assert "PRAGMA integrity_check" in message
    # An empty guard (written on a full disk) or one holding anything else still latches.
    for held in (b"", b"{}", b"[1]", b'{"what": 1}', b"[" * 5000, b"\xff"):
        guard_path(db).write_bytes(held)
        with pytest.raises(StoreLatched, match="reason unknown"):
            refuse_if_latched(db)


def test_the_store_bounds_its_wal_by_the_reserve(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    store = ReasoningStore.open(path, clock=ManualClock(), reserve_bytes=MIN_RESERVE_BYTES)
    policy = wal_policy(MIN_RESERVE_BYTES, 4096)
    try:
        conn = store._conn
        assert conn is not None
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == (
            policy.autocheckpoint_pages
        )
        assert conn.execute("PRAGMA journal_size_limit").fetchone()[0] == (
            policy.journal_size_limit
        )
        wal = Path(f"{path}-wal")
        biggest = 0
        for k in range(200):  # 200 commits of about 2 KiB each
            with store.transaction():
                store.set_meta(f"k{k}", "x" * 2000)
            biggest = max(biggest, wal.stat().st_size)
        # A checkpoint runs after the commit that passes the bound, so one transaction's
        # frames may come on top: still well within the reserve (SQLite's default: 4 MB).
        assert policy.wal_bytes < biggest <= MIN_RESERVE_BYTES // 2, biggest
        store.checkpoint()
        assert wal.stat().st_size == 0
    finally:
        store.close()


def test_startup_checkpoints_a_large_wal_before_its_write(tmp_path: Path) -> None:
    """A WAL left by a process with SQLite's default bound (4 MB) is emptied into the
    database by the next open, before the startup write needs room of its own."""
    path = tmp_path / "cache.sqlite"
    ReasoningStore.open(path, clock=ManualClock()).close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")  # let it grow, as a killed relay left it
    conn.execute("CREATE TABLE ballast (b BLOB)")
    for _ in range(100):
        conn.execute("INSERT INTO ballast VALUES (randomblob(8000))")
    wal = Path(f"{path}-wal")
    grown = wal.stat().st_size
    assert grown > 800_000
    left = wal.read_bytes()
    conn.close()  # closing checkpoints; put the WAL back as a kill -9 leaves it
    wal.write_bytes(left)
    store = ReasoningStore.open(path, clock=ManualClock(), reserve_bytes=MIN_RESERVE_BYTES)
    try:
        assert wal.stat().st_size < 64 * 1024, "the WAL was not checkpointed at startup"
        assert store.integrity_check() == ["ok"]
    finally:
        store.close()
