"""A renewable deadline on the injected monotonic clock.

The IOLoop only wakes us up; whether the deadline has passed is decided by
``clock.monotonic()``, so a wall-clock jump never fires or delays it. Each renewal bumps a
revision, and a wake-up scheduled for an older revision re-checks instead of firing:
stale timer callbacks are harmless.
"""

from __future__ import annotations

from collections.abc import Callable

from tornado.ioloop import IOLoop

from relay.clock import Clock


class Deadline:
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
