"""Time, injected.

Deadlines read :meth:`Clock.monotonic`; retention and timestamps read :meth:`Clock.wall`.
Nothing else in the relay calls :mod:`time` directly, so tests can jump either clock.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards; only differences mean anything."""

    def wall(self) -> float:
        """Seconds since the Unix epoch; may jump in either direction."""


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()


class ManualClock:
    """A clock tests move by hand."""

    def __init__(self, *, monotonic: float = 1000.0, wall: float = 1_767_225_600.0):
        self._monotonic = monotonic
        self._wall = wall

    def monotonic(self) -> float:
        return self._monotonic

    def wall(self) -> float:
        return self._wall

    def advance(self, seconds: float) -> None:
        """Let time pass: both clocks move forward together."""
        if seconds < 0:
            raise ValueError("monotonic time cannot go backwards; use jump_wall")
        self._monotonic += seconds
        self._wall += seconds

    def jump_wall(self, seconds: float) -> None:
        """Move only the wall clock, forwards or backwards (NTP step, manual change)."""
        self._wall += seconds
