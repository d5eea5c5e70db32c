"""Retention in the running relay (design §6 Retention): the clock the cache reads, which
watches for wall-clock trouble, and the hourly cleanup on the IOLoop.

:class:`WatchedClock` is the replay cache's clock. Every wall reading it hands out (a
dispatch, a touch, a commit, a cleanup run) is also a sample for the
:class:`~relay.core.deletion_barrier.DeletionBarrier`, so a touch can never be stamped
with a wall time the barrier did not see. The barrier begins when the clock is made (at
startup) and lives in memory only.

:class:`RetentionCleanup` runs :meth:`ReplayStore.cleanup.reclaim` every
``REASONING_CACHE_CLEANUP_INTERVAL_MS`` (an hour by default) on the IOLoop, the thread
that owns the store's connection. It is scheduled with asyncio's ``call_later``, whose
clock is monotonic: Tornado's ``PeriodicCallback`` follows ``time.time()``, so a wall
clock stepped back two days would stall it for two days. A run deletes nothing while
the barrier is closed; otherwise it reclaims what the cutoff
(``REASONING_CACHE_RETENTION_DAYS``) and the storage rules allow. Each run logs
``cache_cleanup`` with counts only; a store failure is logged and the next run tries
again (it never fails a request).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from relay.clock import Clock
from relay.core.deletion_barrier import ClockSample, DeletionBarrier
from relay.core.records import idle_window_s
from relay.errors import StoreError
from relay.observability import log
from relay.storage.cleanup import CleanupResult
from relay.storage.interface import ReplayStore


class WatchedClock:
    """A :class:`~relay.clock.Clock` whose wall readings feed the deletion barrier."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.barrier = DeletionBarrier.at_startup(self._sample())

    def _sample(self) -> ClockSample:
        return ClockSample(self._clock.wall(), self._clock.monotonic())

    def monotonic(self) -> float:
        return self._clock.monotonic()

    def wall(self) -> float:
        sample = self._sample()
        barrier = self.barrier.observe(sample)
        if barrier.resets != self.barrier.resets:
            # Info, not a warning: a laptop waking from suspend does this every time.
            log.event(
                "retention_barrier_reset",
                cause=barrier.cause.value,
                drift_s=round(self.barrier.drift(sample), 3),
            )
        self.barrier = barrier
        return sample.wall


@dataclass
class RetentionTotals:
    """Since startup (diagnostics; the store is the record)."""

    runs: int = 0
    reclaimed: int = 0
    reclaimed_bytes: int = 0
    failures: int = 0
    last: CleanupResult | None = None
    last_at: float | None = None  # wall time of the newest run
    last_barrier_open: bool = False
    last_eligible: int | None = None  # idle payloads at the newest open run, after it


@dataclass
class RetentionCleanup:
    store: ReplayStore
    clock: WatchedClock
    retention_s: float
    every_s: float = 3600.0
    totals: RetentionTotals = field(default_factory=RetentionTotals)
    _timer: asyncio.TimerHandle | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    def run(self) -> CleanupResult | None:
        """One cleanup run now; ``None`` when the barrier kept it from deleting anything
        (or the store failed)."""
        now = self.clock.wall()  # a sample: the barrier is up to date with this run
        barrier = self.clock.barrier
        totals = self.totals
        totals.runs += 1
        totals.last_at, totals.last_barrier_open = now, barrier.open
        # The planner's expiry test, so a deletion never changes a replay decision.
        cutoff = barrier.idle_cutoff(idle_window_s(self.retention_s))
        if cutoff is None:
            totals.last = None
            log.event(
                "cache_cleanup",
                run=totals.runs,
                barrier="closed",
                barrier_remaining_s=round(barrier.remaining_s, 3),
                reclaimed=0,
                total_reclaimed=totals.reclaimed,
            )
            return None
        try:
            result = self.store.cleanup.reclaim(cutoff, now=now)
            eligible = self.store.cleanup.eligible(cutoff)
        except StoreError as err:
            totals.failures += 1
            log.event("cache_cleanup_failed", logging.WARNING, run=totals.runs, code=err.code)
            return None
        totals.last, totals.last_eligible = result, eligible
        if result.reclaimed:
            self._checkpoint()  # the WAL holds the deletions: keep it bounded (design §6)
        totals.reclaimed += result.reclaimed
        totals.reclaimed_bytes += result.reclaimed_bytes
        log.event(
            "cache_cleanup",
            run=totals.runs,
            barrier="open",
            reclaimed=result.reclaimed,
            reclaimed_bytes=result.reclaimed_bytes,
            examined=result.examined,
            pinned=result.pinned,
            competitor=result.competitor,
            descendant=result.descendant,
            capped=result.capped,
            eligible_left=eligible,
            total_reclaimed=totals.reclaimed,
        )
        return result

    def _checkpoint(self) -> None:
        try:
            self.store.checkpoint()
        except StoreError as err:  # a failed checkpoint loses nothing: the WAL stays valid
            log.event("cache_checkpoint_failed", logging.WARNING, code=err.code)

    def start(self) -> None:
        """Run every ``every_s`` on the running event loop (call from it)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._timer = self._loop.call_later(self.every_s, self._tick)

    def _tick(self) -> None:
        try:
            self.run()
        finally:
            if self._loop is not None:  # not stopped meanwhile
                self._timer = self._loop.call_later(self.every_s, self._tick)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop = None

    def to_json(self) -> dict[str, object]:
        """For the cache API (``encryptedRecords.retention``): counts and times only.
        Reads the barrier as of its newest sample; an admin poll takes no sample."""
        barrier, totals, last = self.clock.barrier, self.totals, self.totals.last
        return {
            "retentionDays": self.retention_s / 86_400,
            "cleanupIntervalSeconds": self.every_s,
            "barrier": {
                "open": barrier.open,
                "remainingSeconds": round(barrier.remaining_s, 3),
                "resets": barrier.resets,
                "cause": barrier.cause.value,
            },
            "runs": totals.runs,
            "failures": totals.failures,
            "reclaimed": totals.reclaimed,
            "reclaimedBytes": totals.reclaimed_bytes,
            "lastRun": None
            if totals.last_at is None
            else {
                "barrierOpen": totals.last_barrier_open,
                "reclaimed": 0 if last is None else last.reclaimed,
                "pinned": 0 if last is None else last.pinned,
                "competitor": 0 if last is None else last.competitor,
                "descendant": 0 if last is None else last.descendant,
                "capped": False if last is None else last.capped,
                "eligibleLeft": totals.last_eligible if last is not None else None,
            },
        }
