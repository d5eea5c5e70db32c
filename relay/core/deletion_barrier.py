"""When retention may delete a payload at all: the deletion barrier (design §6 Retention).

Payload age is measured on the wall clock (``touched_at``), and the wall clock can be
wrong: an NTP step, a manual change, a VM restored from a snapshot. A clock that jumped
40 days ahead would make every payload look idle. So no payload is deleted until this
process has watched the wall clock agree with the monotonic clock for a fixed 30 days:

- every startup begins the barrier (clock tracking is process-local: a restart cannot
  know what the clocks did while it was down, so it starts again);
- a sample whose wall clock is behind the previous one (a backward move), or whose
  wall-minus-monotonic offset differs from the offset when the barrier began by more than
  60 seconds (drift, in either direction, however it accumulated), restarts it.

The idle cutoff is separate: a payload is eligible once ``touched_at`` is older than the
configured window (``REASONING_CACHE_RETENTION_DAYS``) *and* the barrier is open. With
both, a deleted payload was idle for at least 30 days of monotonic time: either it was
last touched before the barrier began (30 monotonic days ago), or after, on a wall clock
that agreed with the monotonic one within the drift limit.

Pure: clock readings are passed in as :class:`ClockSample` values.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Final

DAY_S: Final = 24 * 3600.0  # the one definition (the planner's windows count in it too)
BARRIER_S: Final = 30 * DAY_S  # monotonic time the clocks must agree before any deletion
DRIFT_LIMIT_S: Final = 60.0  # wall/monotonic offset change that restarts the barrier


@dataclass(frozen=True)
class ClockSample:
    """One reading of both clocks, taken together."""

    wall: float
    monotonic: float

    @property
    def offset(self) -> float:
        """Wall minus monotonic: constant while the wall clock runs true."""
        return self.wall - self.monotonic


class BarrierStart(StrEnum):
    """Why the barrier (re)started."""

    STARTUP = "startup"
    WALL_BACKWARDS = "wall_backwards"  # the wall clock read earlier than the last sample
    DRIFT = "drift"  # the wall/monotonic offset moved by more than the drift limit
    MONOTONIC_BACKWARDS = "monotonic_backwards"  # impossible on a sane clock: distrust


@dataclass(frozen=True)
class DeletionBarrier:
    """The barrier's state: when it began, the newest sample, and how often it restarted."""

    since: ClockSample  # the sample the barrier (re)started at
    last: ClockSample  # the newest sample seen
    cause: BarrierStart = BarrierStart.STARTUP
    resets: int = 0  # restarts after the startup one

    @classmethod
    def at_startup(cls, sample: ClockSample) -> DeletionBarrier:
        return cls(sample, sample)

    def observe(self, sample: ClockSample) -> DeletionBarrier:
        """The barrier after one more sample: restarted at ``sample`` when the clocks
        disagree, else the same barrier with ``sample`` as its newest reading."""
        cause = self.disagreement(sample)
        if cause is not None:
            return DeletionBarrier(sample, sample, cause, self.resets + 1)
        return replace(self, last=sample)

    def disagreement(self, sample: ClockSample) -> BarrierStart | None:
        """What is wrong with ``sample`` after this barrier's readings, if anything."""
        if sample.monotonic < self.last.monotonic:
            return BarrierStart.MONOTONIC_BACKWARDS
        if sample.wall < self.last.wall:
            return BarrierStart.WALL_BACKWARDS
        if abs(self.drift(sample)) > DRIFT_LIMIT_S:
            return BarrierStart.DRIFT
        return None

    def drift(self, sample: ClockSample) -> float:
        """How far the wall clock moved against the monotonic one since the barrier began
        (positive: the wall clock ran ahead)."""
        return sample.offset - self.since.offset

    @property
    def elapsed_s(self) -> float:
        """Monotonic time the clocks have agreed, up to the newest sample."""
        return self.last.monotonic - self.since.monotonic

    @property
    def remaining_s(self) -> float:
        """Monotonic time left before deletion may begin (0 once open)."""
        return max(0.0, BARRIER_S - self.elapsed_s)

    @property
    def open(self) -> bool:
        return self.elapsed_s >= BARRIER_S

    def idle_cutoff(self, retention_s: float) -> float | None:
        """The ``touched_at`` below which a payload may be deleted now (the newest sample's
        wall time minus the retention window), or ``None`` while the barrier is closed."""
        if not self.open:
            return None
        return self.last.wall - retention_s
