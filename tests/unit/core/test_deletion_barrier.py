"""The deletion barrier (relay.core.deletion_barrier): table-driven clock histories, and a
property: whatever the clocks do, a payload the barrier and cutoff let go was idle for at
least 30 days of monotonic time (less the drift tolerance of each of two readings)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.core.deletion_barrier import (
    BARRIER_S,
    DAY_S,
    DRIFT_LIMIT_S,
    BarrierStart,
    ClockSample,
    DeletionBarrier,
)

WALL0 = 1_767_225_600.0
MONO0 = 1_000.0


def run(moves: list[tuple[str, float]]) -> DeletionBarrier:
    """A barrier started at (WALL0, MONO0) after ``moves``: ("both", s) lets time pass,
    ("wall", s) steps only the wall clock, ("mono", s) only the monotonic one (a wall
    clock standing still); a sample is taken after each move."""
    wall, mono = WALL0, MONO0
    barrier = DeletionBarrier.at_startup(ClockSample(wall, mono))
    for kind, seconds in moves:
        wall += seconds if kind != "mono" else 0.0
        mono += seconds if kind != "wall" else 0.0
        barrier = barrier.observe(ClockSample(wall, mono))
    return barrier


@pytest.mark.parametrize(
    ("moves", "is_open", "cause", "resets"),
    [
        ([], False, BarrierStart.STARTUP, 0),
        ([("both", BARRIER_S - 1)], False, BarrierStart.STARTUP, 0),
        ([("both", BARRIER_S)], True, BarrierStart.STARTUP, 0),
        # many small steps add up the same way
        ([("both", DAY_S)] * 30, True, BarrierStart.STARTUP, 0),
        # a wall jump forward of 40 days is drift: the barrier starts again
        ([("wall", 40 * DAY_S)], False, BarrierStart.DRIFT, 1),
        ([("both", 29 * DAY_S), ("wall", 40 * DAY_S), ("both", 2 * DAY_S)], False,
         BarrierStart.DRIFT, 1),
        ([("wall", 40 * DAY_S), ("both", BARRIER_S)], True, BarrierStart.DRIFT, 1),
        # two days back: a backward move
        ([("both", 29 * DAY_S), ("wall", -2 * DAY_S)], False, BarrierStart.WALL_BACKWARDS, 1),
        # one second back is still a backward move
        ([("both", 10.0), ("wall", -1.0)], False, BarrierStart.WALL_BACKWARDS, 1),
        # within the drift limit forward: tolerated
        ([("wall", DRIFT_LIMIT_S), ("both", BARRIER_S)], True, BarrierStart.STARTUP, 0),
        ([("wall", DRIFT_LIMIT_S + 0.001)], False, BarrierStart.DRIFT, 1),
        # drift accumulates: two 40 s steps are 80 s from where the barrier began
        ([("wall", 40.0), ("both", DAY_S), ("wall", 40.0)], False, BarrierStart.DRIFT, 1),
        # a wall clock that stands still while monotonic runs: drift the other way
        ([("mono", DRIFT_LIMIT_S), ("both", BARRIER_S)], True, BarrierStart.STARTUP, 0),
        ([("both", DAY_S), ("mono", DRIFT_LIMIT_S + 1)], False, BarrierStart.DRIFT, 1),
        # ±262 s bumps, repeated: every one restarts it
        ([("wall", 262.0), ("both", 3600.0), ("wall", -262.0), ("both", 3600.0)] * 3, False,
         BarrierStart.WALL_BACKWARDS, 6),
    ],
)  # fmt: skip
def test_barrier_history(
    moves: list[tuple[str, float]], is_open: bool, cause: BarrierStart, resets: int
) -> None:
    barrier = run(moves)
    assert (barrier.open, barrier.cause, barrier.resets) == (is_open, cause, resets)
    assert barrier.remaining_s == max(0.0, BARRIER_S - barrier.elapsed_s)


def test_monotonic_going_back_is_distrusted() -> None:
    barrier = DeletionBarrier.at_startup(ClockSample(WALL0, MONO0))
    barrier = barrier.observe(ClockSample(WALL0 + BARRIER_S, MONO0 + BARRIER_S))
    assert barrier.open
    barrier = barrier.observe(ClockSample(WALL0 + BARRIER_S + 1, MONO0 + BARRIER_S - 1))
    assert (barrier.open, barrier.cause) == (False, BarrierStart.MONOTONIC_BACKWARDS)


@pytest.mark.parametrize("days", [30, 45, 60])
def test_idle_cutoff_is_the_window_behind_the_newest_sample(days: int) -> None:
    closed = run([("both", BARRIER_S - 1)])
    assert closed.idle_cutoff(days * DAY_S) is None
    opened = run([("both", BARRIER_S)])
    assert opened.idle_cutoff(days * DAY_S) == WALL0 + BARRIER_S - days * DAY_S


def test_a_restart_begins_the_barrier_again() -> None:
    """Tracking is process-local: a new process starts closed whatever came before."""
    barrier = run([("both", 2 * BARRIER_S)])
    assert barrier.open
    restarted = DeletionBarrier.at_startup(barrier.last)
    assert not restarted.open and restarted.remaining_s == BARRIER_S


# --- the property ---------------------------------------------------------------------------

moves = st.lists(
    st.one_of(
        st.tuples(
            st.just("both"), st.sampled_from([1.0, 59.0, 3600.0, DAY_S, 7 * DAY_S, 16 * DAY_S])
        ),
        st.tuples(st.just("both"), st.floats(0, 40 * DAY_S)),
        st.tuples(st.just("wall"), st.floats(-50 * DAY_S, 50 * DAY_S)),
        st.tuples(st.just("both"), st.sampled_from([BARRIER_S, BARRIER_S + DAY_S])),
        st.tuples(st.just("wall"), st.sampled_from([-262.0, 262.0, -59.0, 59.0, -61.0, 61.0])),
        st.tuples(st.just("wall"), st.sampled_from([40 * DAY_S, -2 * DAY_S, 29 * DAY_S])),
        st.tuples(st.just("touch"), st.just(0.0)),
        st.tuples(st.just("restart"), st.just(0.0)),
    ),
    max_size=60,
)


@dataclass
class Payload:
    touched_at: float  # wall clock, max of every touch
    touched_mono: float  # monotonic time of the newest touch
    epoch: tuple[int, int] = (0, 0)  # (startups, resets) of the barrier it was touched in


@settings(max_examples=400, deadline=None)
@given(moves=moves, retention_days=st.sampled_from([30, 31, 60, 365]))
def test_nothing_is_let_go_early(moves: list[tuple[str, float]], retention_days: int) -> None:
    """Every wall reading is a sample (as the cache's clock makes it). Whenever the cutoff
    would let the payload go, its newest touch is at least 30 monotonic days old (minus
    twice the drift tolerance), and at least the retention window when the touch happened
    while this barrier was running."""
    retention_s = retention_days * DAY_S
    wall, mono = WALL0, MONO0
    barrier = DeletionBarrier.at_startup(ClockSample(wall, mono))
    payload = Payload(wall, mono)
    startups = 0
    for kind, seconds in moves:
        if kind == "both":
            wall, mono = wall + seconds, mono + seconds
        elif kind == "wall":
            wall += seconds
        elif kind == "restart":
            barrier = DeletionBarrier.at_startup(ClockSample(wall, mono))
            startups += 1
        barrier = barrier.observe(ClockSample(wall, mono))
        epoch = (startups, barrier.resets)
        if kind == "touch":
            payload = Payload(max(payload.touched_at, wall), mono, epoch)
        cutoff = barrier.idle_cutoff(retention_s)
        if cutoff is not None and payload.touched_at < cutoff:
            idle = mono - payload.touched_mono
            assert idle >= BARRIER_S - 2 * DRIFT_LIMIT_S, (idle, barrier)
            if payload.epoch == epoch:  # touched while this very barrier was running
                assert idle >= retention_s - 2 * DRIFT_LIMIT_S, (idle, barrier)
