"""Disk pressure decisions (design §6 "Disk pressure"): pure arithmetic, no I/O.

Three rules keep a store usable on any volume, however small:

- **WAL bound.** The write-ahead log is checkpointed once it holds a quarter of the
  reserve (at most SQLite's own 4 MiB default) and truncated back to that size, so
  releasing the reserve always leaves room to checkpoint the whole WAL into the database
  file and then write one more small safety transaction.
- **Admission.** A payload is stored only while the reserve is held, the database's used
  bytes stay within ``REASONING_CACHE_DISK_BYTES``, and the volume keeps room for the
  payload twice (WAL, then database) plus one WAL's worth. Otherwise the generation is
  observed without its payload: nothing already stored is deleted to make room.
- **Reserve and latch.** A safety write (intent, marker, observation, recovery) that fails
  for lack of space or an I/O error releases the reserve and is retried once; a second
  failure latches the cache. The reserve comes back only when the volume has room for it
  twice over, so re-creating it never takes the last free bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

KIB: Final = 1024
MIB: Final = 1024 * KIB
DEFAULT_DISK_BYTES: Final = 1024 * MIB  # REASONING_CACHE_DISK_BYTES
DEFAULT_RESERVE_BYTES: Final = 64 * MIB  # REASONING_CACHE_RESERVE_BYTES
MIN_RESERVE_BYTES: Final = 64 * KIB
MAX_WAL_BYTES: Final = 4 * MIB  # SQLite's default: 1,000 pages of 4 KiB
WAL_FRAME_HEADER: Final = 24  # bytes before each page in the WAL
WAL_HEADER: Final = 32  # bytes at the start of the WAL file


@dataclass(frozen=True)
class WalPolicy:
    """``PRAGMA wal_autocheckpoint`` (pages) and ``PRAGMA journal_size_limit`` (bytes)."""

    autocheckpoint_pages: int
    journal_size_limit: int

    @property
    def wal_bytes(self) -> int:
        """The WAL size at which a checkpoint runs (one transaction may add more)."""
        return self.journal_size_limit


def wal_policy(reserve_bytes: int, page_size: int) -> WalPolicy:
    """The WAL bound for a reserve: a quarter of it, in whole frames, at least one page."""
    frame = page_size + WAL_FRAME_HEADER
    limit = min(MAX_WAL_BYTES, reserve_bytes // 4)
    pages = max(1, (limit - WAL_HEADER) // frame)
    return WalPolicy(pages, WAL_HEADER + pages * frame)


class Admission(StrEnum):
    """Why a payload was not stored (logged as ``admission`` with ``disk_pressure``)."""

    RESERVE_RELEASED = "reserve_released"  # the disk filled up: safety writes only
    DISK_LIMIT = "disk_limit"  # the database would exceed REASONING_CACHE_DISK_BYTES
    LOW_FREE_SPACE = "low_free_space"  # the volume lacks room for it and a checkpoint


@dataclass(frozen=True)
class DiskState:
    """What the shell measured just before deciding (no I/O here)."""

    used_bytes: int  # database pages in use (free pages excluded: they are reused)
    free_bytes: int  # free on the volume for this user (statvfs f_bavail * f_frsize)
    reserve_held: bool


def refuse_payload(
    state: DiskState, payload_bytes: int, *, disk_bytes: int, wal: WalPolicy
) -> Admission | None:
    """``None`` when the payload may be stored, else why not."""
    if not state.reserve_held:
        return Admission.RESERVE_RELEASED
    if state.used_bytes + payload_bytes > disk_bytes:
        return Admission.DISK_LIMIT
    if state.free_bytes < 2 * payload_bytes + wal.wal_bytes:
        return Admission.LOW_FREE_SPACE
    return None


def may_recreate_reserve(free_bytes: int, reserve_bytes: int) -> bool:
    """Whether a released (or never allocated) reserve may be allocated again: only when
    as much stays free afterwards, so the reserve never takes the volume's last bytes."""
    return free_bytes >= 2 * reserve_bytes


class AfterFailure(StrEnum):
    RELEASE_AND_RETRY = "release_and_retry"  # free the reserve, run the transaction again
    RETRY = "retry"  # no reserve left to free: run it again once anyway
    LATCH = "latch"  # failed twice: write .guard and stop the cache


def after_safety_failure(failures: int, reserve_held: bool) -> AfterFailure:
    """The step after the ``failures``-th failure of one safety write (1 or 2)."""
    if failures >= 2:
        return AfterFailure.LATCH
    return AfterFailure.RELEASE_AND_RETRY if reserve_held else AfterFailure.RETRY
