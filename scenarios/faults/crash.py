"""Crash faults: SIGKILL the relay at a moment chosen from outside, or at a named point.

From outside (the harness decides the moment by observing the processes):

- :func:`kill_after_upstream_events`: the fake has sent N events of the current call
  (its record grows event by event);
- :func:`kill_after_client_frames`: the client has received N frames;
- :func:`kill_while_client_stalls`: the client stopped reading and the relay is blocked
  writing to it.

From inside, where outside timing cannot reach (between a commit and the next frame):
:func:`arm` builds ``RELAY_TEST_CRASH_AT`` for the next relay start; the relay then
SIGKILLs itself at that point (see relay.settings.crashpoints).
"""

from __future__ import annotations

from relay.settings.crashpoints import KNOWN_POINTS, REQUEST_POINTS
from scenarios.client import RelayConnection
from scenarios.faults.network import stall_until_blocked
from scenarios.runner import Harness


def arm(*points: str | tuple[str, int]) -> str:
    """``arm("before_terminal_frame", ("after_upstream_headers", 2))`` → env value."""
    parts: list[str] = []
    for point in points:
        name, hit = (point, 1) if isinstance(point, str) else point
        if name not in KNOWN_POINTS:
            raise ValueError(f"unknown crash point {name!r}; known: {', '.join(KNOWN_POINTS)}")
        parts.append(name if hit == 1 else f"{name}@{hit}")
    return ",".join(parts)


def every_point() -> tuple[str, ...]:
    """Every named point a request passes, for "fail at every point" loops (the offline
    backup's points are exercised by tests/integration/test_cache_backup.py)."""
    return REQUEST_POINTS


def kill_after_upstream_events(harness: Harness, events: int, timeout: float = 10.0) -> None:
    assert harness.fake is not None
    harness.fake.wait_for_events(events, timeout)
    harness.kill_relay(f"after the upstream sent {events} events")


def kill_after_client_frames(harness: Harness, conn: RelayConnection, frames: int) -> None:
    conn.read_frames(frames)
    harness.kill_relay(f"after the client received {frames} frames")


def kill_while_client_stalls(harness: Harness, conn: RelayConnection) -> int:
    queued = stall_until_blocked(conn)
    harness.kill_relay(f"while the client stalls ({queued} bytes unread)")
    return queued
