"""Time, injected, and the deadlines that run on it.

Deadlines read :meth:`Clock.monotonic`; retention and timestamps read :meth:`Clock.wall`.
Nothing else in the relay calls :mod:`time` directly, so tests can jump either clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from tornado.ioloop import IOLoop


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


class Deadline:
    """A renewable deadline on the injected monotonic clock.

    The IOLoop only wakes us up; whether the deadline has passed is decided by
    ``clock.monotonic()``, so a wall-clock jump never fires or delays it. Each renewal bumps
    a revision, and a wake-up scheduled for an older revision re-checks instead of firing:
    stale timer callbacks are harmless. (Here, below transport, observability and the
    tunnel, which all time things with it.)
    """

    def __init__(self, clock: Clock, seconds: float, on_expire: Callable[[], None]) -> None:
        self._clock = clock
        self._seconds = seconds
        self._on_expire = on_expire
        self._expires_at = clock.monotonic() + seconds
        self._handle: object | None = None
        self._stopped = False
        self.expired = False
        self._schedule(seconds)

    @property
    def remaining(self) -> float:
        return self._expires_at - self._clock.monotonic()

    def renew(self) -> None:
        """Push the deadline out by its full length from now (cheap: no rescheduling)."""
        if not self._stopped:
            self._expires_at = self._clock.monotonic() + self._seconds

    def stop(self) -> None:
        self._stopped = True
        if self._handle is not None:
            IOLoop.current().remove_timeout(self._handle)
            self._handle = None

    def check(self) -> bool:
        """Fire if due; otherwise sleep again until the (possibly renewed) deadline."""
        self._handle = None
        if self._stopped:
            return False
        remaining = self.remaining
        if remaining <= 0:
            self._stopped = True
            self.expired = True
            self._on_expire()
            return True
        self._schedule(remaining)
        return False

    def _schedule(self, delay: float) -> None:
        # A small floor keeps a tight loop from spinning when the two clocks disagree.
        self._handle = IOLoop.current().call_later(max(delay, 0.005), self.check)
