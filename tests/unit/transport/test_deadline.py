"""relay.transport.deadline: a renewable deadline on the injected monotonic clock.

The clock is a ManualClock, so whether the deadline is due is decided by the test; the
IOLoop only delivers wake-ups (``check``), which the tests call themselves or await.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from relay.clock import ManualClock
from relay.transport.deadline import Deadline


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


class Expiry:
    """Counts the deadline's expirations and lets a test await the first."""

    def __init__(self) -> None:
        self.count = 0
        self.event = asyncio.Event()

    def __call__(self) -> None:
        self.count += 1
        self.event.set()


def test_it_expires_when_the_monotonic_clock_reaches_it() -> None:
    async def test() -> None:
        clock, fired = ManualClock(), Expiry()
        deadline = Deadline(clock, 10, fired)
        assert deadline.remaining == 10
        clock.advance(9.5)
        assert deadline.check() is False
        assert (deadline.expired, fired.count, deadline.remaining) == (False, 0, 0.5)
        clock.advance(0.5)
        assert deadline.check() is True
        assert (deadline.expired, fired.count) == (True, 1)
        assert deadline.check() is False  # fired once: later wake-ups do nothing
        assert fired.count == 1
        deadline.stop()

    run(test)


def test_renewing_pushes_it_out_by_its_full_length_from_now() -> None:
    async def test() -> None:
        clock, fired = ManualClock(), Expiry()
        deadline = Deadline(clock, 10, fired)
        clock.advance(6)
        deadline.renew()
        clock.advance(6)  # 12 s after the start, 6 after the renewal
        assert deadline.check() is False
        assert deadline.remaining == 4
        clock.advance(4)
        assert deadline.check() is True
        assert fired.count == 1

    run(test)


def test_a_stopped_deadline_never_fires_and_is_not_renewed() -> None:
    async def test() -> None:
        clock, fired = ManualClock(), Expiry()
        deadline = Deadline(clock, 10, fired)
        deadline.stop()
        remaining = deadline.remaining
        deadline.renew()  # no effect once stopped
        assert deadline.remaining == remaining
        clock.advance(20)
        assert deadline.check() is False
        assert (deadline.expired, fired.count) == (False, 0)

    run(test)


def test_a_wall_clock_jump_neither_fires_nor_delays_it() -> None:
    async def test() -> None:
        clock, fired = ManualClock(), Expiry()
        deadline = Deadline(clock, 10, fired)
        clock.jump_wall(86_400 * 365)
        assert deadline.check() is False
        clock.jump_wall(-86_400 * 730)
        clock.advance(10)
        assert deadline.check() is True
        assert fired.count == 1

    run(test)


def test_the_loop_wakes_it_and_a_stale_wake_up_sleeps_again() -> None:
    """The loop's timer fires after the real delay; with the manual clock not yet moved,
    the wake-up finds the deadline not due and schedules another; once the clock has
    moved, a wake-up fires it."""

    async def test() -> None:
        clock, fired = ManualClock(), Expiry()
        deadline = Deadline(clock, 0.01, fired)
        checks: list[bool] = []
        checked = asyncio.Event()
        original = deadline.check

        def counting() -> bool:
            result = original()
            checks.append(result)
            checked.set()
            return result

        deadline.check = counting  # type: ignore[method-assign]
        deadline._schedule(0.01)  # the wake-up after construction, through the spy
        await asyncio.wait_for(checked.wait(), timeout=5)  # the loop's real timer
        assert checks[0] is False and fired.count == 0  # stale: not due on the clock
        clock.advance(0.01)
        await asyncio.wait_for(fired.event.wait(), timeout=5)
        assert fired.count == 1 and deadline.expired

    run(test)


def test_stopping_cancels_the_pending_wake_up() -> None:
    async def test() -> None:
        clock, fired = ManualClock(), Expiry()
        deadline = Deadline(clock, 10, fired)
        handle = deadline._handle  # the loop's timer (an asyncio TimerHandle under Tornado)
        assert isinstance(handle, asyncio.TimerHandle) and not handle.cancelled()
        deadline.stop()
        assert handle.cancelled()
        clock.advance(10)
        assert deadline.check() is False and fired.count == 0

    run(test)


@pytest.mark.parametrize("seconds", [0, -1])
def test_a_deadline_already_due_fires_on_the_next_wake_up(seconds: float) -> None:
    async def test() -> None:
        fired = Expiry()
        deadline = Deadline(ManualClock(), seconds, fired)
        assert deadline.remaining <= 0 and not deadline.expired  # nothing fires inline
        await asyncio.wait_for(fired.event.wait(), timeout=5)
        assert fired.count == 1 and deadline.expired

    run(test)
