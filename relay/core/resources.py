"""Byte allowances for optional caching (design §5, §9): pure accounting, no I/O.

With memory budget M, replay ceiling R, entry allowance E, scratch S, measured canonical
history bytes C and selected original output bytes P:

- hot cache H = min(4 MiB, M // 32);
- shared preparation allowance H + S + R (one synchronous workspace);
- each session 64 KiB + 2E + 2(C + P), plus at most ``max_concurrent`` sessions.

These are simple allowances, not a measured whole-process memory guarantee. A request
that cannot get a session is served without caching (its position poisoned); a replay
whose bytes no longer fit is dropped while the generation is still observed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from relay.errors import ConfigError

KIB: Final = 1024
MIB: Final = 1024 * KIB
SESSION_BASE: Final = 64 * KIB
SCRATCH_BYTES: Final = 16 * MIB
HOT_CACHE_CAP: Final = 4 * MIB


class BudgetTooSmall(ConfigError):
    """The configuration cannot fit the shared work plus one minimal session."""


@dataclass(frozen=True)
class CacheBudget:
    memory_bytes: int
    max_entry_bytes: int
    max_replay_bytes: int
    max_concurrent: int
    scratch_bytes: int = SCRATCH_BYTES

    @property
    def hot_cache_bytes(self) -> int:
        return min(HOT_CACHE_CAP, self.memory_bytes // 32)

    @property
    def shared_bytes(self) -> int:
        return self.hot_cache_bytes + self.scratch_bytes + self.max_replay_bytes

    @property
    def session_bytes(self) -> int:
        """What all sessions together may hold."""
        return self.memory_bytes - self.shared_bytes

    def check(self) -> None:
        if self.session_bytes < SESSION_BASE:
            raise BudgetTooSmall(
                f"REASONING_CACHE_MEMORY_BYTES={self.memory_bytes} cannot fit the shared cache "
                f"work ({self.shared_bytes} bytes: hot cache, 16 MiB scratch and "
                f"REASONING_CACHE_MAX_REPLAY_BYTES) plus one 64 KiB session; raise it or lower "
                "REASONING_CACHE_MAX_REPLAY_BYTES"
            )

    def allowance(self, history_bytes: int, replay_bytes: int = 0) -> int:
        return SESSION_BASE + 2 * self.max_entry_bytes + 2 * (history_bytes + replay_bytes)

    @property
    def effective_concurrent(self) -> int:
        """The most sessions that can hold a lease at once: ``max_concurrent``, or fewer
        when the session bytes cannot fit that many of the smallest lease (an empty
        history, nothing replayed). Longer histories make it fewer still."""
        fits = max(0, self.session_bytes) // self.allowance(0)
        return min(self.max_concurrent, fits)

    def memory_for(self, sessions: int) -> int:
        """A ``REASONING_CACHE_MEMORY_BYTES`` that fits ``sessions`` smallest leases."""
        return (
            HOT_CACHE_CAP
            + self.scratch_bytes
            + self.max_replay_bytes
            + sessions * (self.allowance(0))
        )

    def concurrency_warning(self) -> str | None:
        """What to tell the operator when ``max_concurrent`` cannot be reached, else None."""
        effective = self.effective_concurrent
        if effective >= self.max_concurrent:
            return None
        return (
            f"REASONING_CACHE_MAX_CONCURRENT={self.max_concurrent} cannot be reached: the "
            f"memory budget fits {effective} cache sessions (each reserves 64 KiB + 2 x "
            f"REASONING_CACHE_MAX_ENTRY_BYTES={self.max_entry_bytes} up front); raise "
            f"REASONING_CACHE_MEMORY_BYTES to at least {self.memory_for(self.max_concurrent)} "
            "or lower REASONING_CACHE_MAX_ENTRY_BYTES"
        )


class Lease:
    """One session's allowance; grows once the replay plan's size is known."""

    __slots__ = ("bytes", "history_bytes", "released")

    def __init__(self, history_bytes: int, size: int) -> None:
        self.history_bytes = history_bytes
        self.bytes = size
        self.released = False


class CapacityLedger:
    def __init__(self, budget: CacheBudget) -> None:
        self.budget = budget
        self.in_use = 0
        self.sessions = 0

    def try_acquire(self, history_bytes: int) -> Lease | None:
        """A session for a history of ``history_bytes`` canonical bytes, or ``None``."""
        size = self.budget.allowance(history_bytes)
        if self.sessions >= self.budget.max_concurrent:
            return None
        if self.in_use + size > self.budget.session_bytes:
            return None
        self.in_use += size
        self.sessions += 1
        return Lease(history_bytes, size)

    def try_grow(self, lease: Lease, replay_bytes: int) -> bool:
        """Extend a lease to cover ``replay_bytes`` of selected original output."""
        size = self.budget.allowance(lease.history_bytes, replay_bytes)
        extra = size - lease.bytes
        if extra <= 0:
            return True
        if self.in_use + extra > self.budget.session_bytes:
            return False
        self.in_use += extra
        lease.bytes = size
        return True

    def release(self, lease: Lease) -> None:
        if lease.released:
            return
        lease.released = True
        self.in_use -= lease.bytes
        self.sessions -= 1
