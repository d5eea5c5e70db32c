"""The renewable deadline: the injected monotonic clock decides, the IOLoop only wakes it.

Most tests replace the IOLoop's timers with :class:`FakeTimers`, so a wake-up happens
exactly when the test says and time moves only through :class:`ManualClock`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay import clock as deadline_module
from relay.clock import Deadline, ManualClock, SystemClock


class FakeTimers:
    """``IOLoop.current()`` for the deadline: records ``call_later``, wakes on demand."""

    def __init__(self) -> None:
        self.pending: dict[object, tuple[float, Callable[[], object]]] = {}
        self.delays: list[float] = []  # every delay ever asked for, in order

    def current(self) -> FakeTimers:
        return self

    def call_later(self, delay: float, callback: Callable[[], object]) -> object:
        handle = object()
        self.pending[handle] = (delay, callback)
        self.delays.append(delay)
        return handle

    def remove_timeout(self, handle: object) -> None:
        self.pending.pop(handle, None)

    def wake(self) -> None:
        """The one pending timer fires (whatever the clock says: a timer may be early)."""
        assert len(self.pending) == 1, self.pending
        handle, (_, callback) = next(iter(self.pending.items()))
        del self.pending[handle]
        callback()


@pytest.fixture
def timers(monkeypatch: pytest.MonkeyPatch) -> FakeTimers:
    fake = FakeTimers()
    monkeypatch.setattr(deadline_module, "IOLoop", fake)
    return fake


class Expiries:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def test_it_fires_once_when_the_monotonic_clock_has_passed_it(timers: FakeTimers) -> None:
    clock, fired = ManualClock(), Expiries()
    deadline = Deadline(clock, 10, fired)
    assert timers.delays == [10]
    assert deadline.remaining == 10
    clock.advance(10)
    timers.wake()
    assert fired.count == 1 and deadline.expired
    assert timers.pending == {}  # nothing scheduled after firing
    assert deadline.check() is False  # already fired: never again
    assert fired.count == 1


def test_an_early_wake_sleeps_again_for_what_is_left(timers: FakeTimers) -> None:
    clock, fired = ManualClock(), Expiries()
    deadline = Deadline(clock, 10, fired)
    clock.advance(4)
    timers.wake()
    assert fired.count == 0 and not deadline.expired
    assert timers.delays == [10, 6]
    clock.advance(6)
    timers.wake()
    assert fired.count == 1


def test_renewing_moves_it_out_without_rescheduling(timers: FakeTimers) -> None:
    clock, fired = ManualClock(), Expiries()
    deadline = Deadline(clock, 10, fired)
    clock.advance(4)
    deadline.renew()
    assert timers.delays == [10]  # renewal is cheap: the old timer stays
    assert deadline.remaining == 10
    clock.advance(6)
    timers.wake()  # the stale wake-up for the first expiry re-checks instead of firing
    assert fired.count == 0
    assert timers.delays == [10, 4]
    clock.advance(4)
    timers.wake()
    assert fired.count == 1


def test_a_wall_clock_jump_neither_fires_nor_delays_it(timers: FakeTimers) -> None:
    clock, fired = ManualClock(), Expiries()
    deadline = Deadline(clock, 10, fired)
    clock.jump_wall(+86_400)
    timers.wake()
    assert fired.count == 0 and deadline.remaining == 10
    clock.jump_wall(-2 * 86_400)
    clock.advance(10)
    timers.wake()
    assert fired.count == 1


def test_stop_cancels_the_timer_and_later_wakes_do_nothing(timers: FakeTimers) -> None:
    clock, fired = ManualClock(), Expiries()
    deadline = Deadline(clock, 10, fired)
    clock.advance(3)
    deadline.stop()
    assert timers.pending == {}
    clock.advance(30)
    deadline.renew()  # no effect once stopped
    assert deadline.remaining == -23
    assert deadline.check() is False
    assert fired.count == 0 and not deadline.expired
    deadline.stop()  # twice is fine


def test_a_tiny_remainder_is_floored_so_it_cannot_spin(timers: FakeTimers) -> None:
    clock, fired = ManualClock(), Expiries()
    Deadline(clock, 1, fired)
    clock.advance(0.9999)
    timers.wake()
    assert fired.count == 0
    assert timers.delays[-1] == 0.005
    past = Deadline(clock, -5, fired)  # already due: the first wake-up fires it
    assert timers.delays[-1] == 0.005
    assert past.check() is True
    assert fired.count == 1


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.floats(0, 20, allow_nan=False)),
        st.tuples(st.just("renew"), st.just(0.0)),
        st.tuples(st.just("wake"), st.just(0.0)),
        st.tuples(st.just("jump_wall"), st.floats(-1e6, 1e6, allow_nan=False)),
    ),
    max_size=40,
)


@given(seconds=st.floats(0.5, 15, allow_nan=False), operations=OPERATIONS)
def test_it_fires_at_the_first_wake_after_its_length_of_inactivity(
    seconds: float, operations: list[tuple[str, float]]
) -> None:
    """Against a model: renewals move the due time, only wakes can fire, at most once."""
    timers = FakeTimers()
    with mock.patch.object(deadline_module, "IOLoop", timers):
        clock, fired = ManualClock(), Expiries()
        deadline = Deadline(clock, seconds, fired)
        due = clock.monotonic() + seconds
        should_have_fired = False
        for name, value in operations:
            if name == "advance":
                clock.advance(value)
            elif name == "jump_wall":
                clock.jump_wall(value)
            elif name == "renew" and not should_have_fired:
                deadline.renew()
                due = clock.monotonic() + seconds
            elif name == "wake" and timers.pending:
                timers.wake()
                should_have_fired = should_have_fired or clock.monotonic() >= due
            assert fired.count == int(should_have_fired)
            assert deadline.expired is should_have_fired
            # Until it fires there is always exactly one wake-up pending; after, none.
            assert len(timers.pending) == (0 if should_have_fired else 1)
            if not should_have_fired:
                assert deadline.remaining == pytest.approx(due - clock.monotonic())


def test_on_a_real_ioloop_it_fires_by_itself() -> None:
    async def scenario() -> None:
        fired = asyncio.Event()
        deadline = Deadline(SystemClock(), 0.02, fired.set)
        await asyncio.wait_for(fired.wait(), 10)
        assert deadline.expired

    asyncio.run(scenario())
