"""relay.clock: the injected clock (monotonic for deadlines, wall for timestamps)."""

from __future__ import annotations

import time

import pytest

from relay.clock import Clock, ManualClock, SystemClock


def test_the_system_clock_reads_the_operating_system_s_clocks() -> None:
    clock: Clock = SystemClock()
    before_mono, before_wall = time.monotonic(), time.time()
    mono, wall = clock.monotonic(), clock.wall()
    after_mono, after_wall = time.monotonic(), time.time()
    assert before_mono <= mono <= after_mono
    assert before_wall <= wall <= after_wall
    assert clock.monotonic() >= mono  # never backwards


def test_a_manual_clock_starts_where_it_is_told() -> None:
    clock: Clock = ManualClock(monotonic=5.0, wall=100.0)
    assert (clock.monotonic(), clock.wall()) == (5.0, 100.0)
    default = ManualClock()
    assert (default.monotonic(), default.wall()) == (1000.0, 1_767_225_600.0)


def test_advancing_moves_both_clocks_together() -> None:
    clock = ManualClock(monotonic=0.0, wall=50.0)
    clock.advance(2.5)
    clock.advance(0)
    assert (clock.monotonic(), clock.wall()) == (2.5, 52.5)


def test_monotonic_time_never_goes_backwards() -> None:
    clock = ManualClock(monotonic=10.0, wall=10.0)
    with pytest.raises(ValueError, match="jump_wall"):
        clock.advance(-1)
    assert (clock.monotonic(), clock.wall()) == (10.0, 10.0)


@pytest.mark.parametrize("jump", [3600.0, -86_400.0])
def test_a_wall_jump_leaves_monotonic_time_alone(jump: float) -> None:
    clock = ManualClock(monotonic=10.0, wall=1000.0)
    clock.jump_wall(jump)
    assert (clock.monotonic(), clock.wall()) == (10.0, 1000.0 + jump)
