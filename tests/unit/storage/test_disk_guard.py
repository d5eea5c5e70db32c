"""The reserve file (real blocks), the .guard latch, and the store's WAL discipline."""

from __future__ import annotations

import errno
import fcntl
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from relay.clock import ManualClock
from relay.core.disk_policy import MIN_RESERVE_BYTES, wal_policy
from relay.errors import StoreLatched
from relay.storage import portable
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


def test_the_reserve_says_how_it_was_made(tmp_path: Path) -> None:
    guard = DiskGuard(tmp_path / "cache.sqlite", 256 * 1024)
    assert guard.ensure_reserve()
    if portable.FORCE_FALLBACKS:  # RELAY_TEST_FORCE_PORTABLE_FALLBACKS=1 (nox -s tests)
        assert guard.allocated_by == "zeros"
    elif hasattr(os, "posix_fallocate"):
        assert guard.allocated_by == "posix_fallocate"


def test_without_posix_fallocate_the_reserve_is_still_physical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(os, "posix_fallocate", raising=False)  # as on macOS
    guard = DiskGuard(tmp_path / "cache.sqlite", 3 * portable.ZERO_CHUNK + 4096)
    assert guard.ensure_reserve()
    assert guard.allocated_by in ("f_preallocate", "zeros")
    assert guard.reserve.stat().st_size == guard.reserve_bytes
    assert allocated(guard.reserve) >= guard.reserve_bytes, "a sparse reserve frees nothing"
    assert guard.reserve_held
    assert guard.release_reserve() and not guard.reserve.exists()


class FakeFcntl:
    """``fcntl.fcntl`` for ``F_PREALLOCATE`` as macOS takes it, on any platform: records
    each ``fstore_t`` and fails the calls listed in ``fail`` (by flags)."""

    def __init__(self, fail: dict[int, int]) -> None:
        self.fail = fail
        self.calls: list[tuple[int, int, int, int, int]] = []

    def __call__(self, fd: int, cmd: int, arg: Any = 0) -> Any:
        assert cmd == portable.F_PREALLOCATE
        fields = portable.FSTORE.unpack(arg)
        self.calls.append(fields)
        if fields[0] in self.fail:
            raise OSError(self.fail[fields[0]], os.strerror(self.fail[fields[0]]))
        return arg  # allocates nothing: the check after it must catch that


CONTIG_ALL = portable.F_ALLOCATECONTIG | portable.F_ALLOCATEALL


@pytest.mark.parametrize(
    ("fail", "flags_tried"),
    [
        ({}, [CONTIG_ALL]),
        ({CONTIG_ALL: errno.ENOSPC}, [CONTIG_ALL, portable.F_ALLOCATEALL]),  # fragmented
        ({CONTIG_ALL: errno.ENOSPC, portable.F_ALLOCATEALL: errno.ENOTSUP}, [
            CONTIG_ALL, portable.F_ALLOCATEALL
        ]),  # not supported by this volume
    ],
)  # fmt: skip
def test_f_preallocate_is_asked_as_macos_takes_it_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: dict[int, int], flags_tried: list[int]
) -> None:
    monkeypatch.setattr(portable, "FORCE_FALLBACKS", False)
    monkeypatch.delattr(os, "posix_fallocate", raising=False)
    monkeypatch.setattr(portable, "has_f_preallocate", lambda: True)
    fake = FakeFcntl(fail)
    monkeypatch.setattr(fcntl, "fcntl", fake)
    guard = DiskGuard(tmp_path / "cache.sqlite", 256 * 1024)
    assert guard.ensure_reserve()
    assert [call[0] for call in fake.calls] == flags_tried
    # From the physical end of the file, the whole length, nothing allocated yet.
    assert all(call[1:] == (portable.F_PEOFPOSMODE, 0, 256 * 1024, 0) for call in fake.calls)
    # The fake allocated nothing, so the file was written with zeros instead.
    assert guard.allocated_by == "zeros" and guard.reserve_held


def test_f_preallocate_on_a_full_volume_leaves_no_reserve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(portable, "FORCE_FALLBACKS", False)
    monkeypatch.delattr(os, "posix_fallocate", raising=False)
    monkeypatch.setattr(portable, "has_f_preallocate", lambda: True)
    monkeypatch.setattr(
        fcntl, "fcntl", FakeFcntl({CONTIG_ALL: errno.ENOSPC, portable.F_ALLOCATEALL: errno.ENOSPC})
    )
    guard = DiskGuard(tmp_path / "cache.sqlite", 256 * 1024)
    assert not guard.ensure_reserve()
    assert not guard.reserve.exists()


def test_a_volume_that_keeps_no_blocks_for_zeros_is_not_written_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def sparse(fd: int, length: int) -> str:  # as on a volume that compresses zeros
        calls.append(length)
        os.ftruncate(fd, length)
        return "zeros"

    monkeypatch.setattr("relay.storage.disk_guard.preallocate", sparse)
    guard = DiskGuard(tmp_path / "cache.sqlite", 256 * 1024)
    assert not guard.ensure_reserve() and not guard.reserve.exists()
    assert not guard.ensure_reserve()
    assert calls == [256 * 1024]


def test_forced_fallbacks_write_zeros_even_where_posix_fallocate_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(portable, "FORCE_FALLBACKS", True)
    guard = DiskGuard(tmp_path / "cache.sqlite", 256 * 1024)
    assert guard.ensure_reserve()
    assert guard.allocated_by == "zeros" and guard.reserve_held


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
