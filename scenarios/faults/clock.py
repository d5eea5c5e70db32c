"""Clock faults on the relay process through libfaketime (Debian ``faketime``).

The relay is started with ``libfaketime.so.1`` preloaded and ``FAKETIME_TIMESTAMP_FILE``
pointing at a file that holds the current offset (``+3600``, ``-86400.5``);
``FAKETIME_NO_CACHE=1`` makes libfaketime re-read it on every clock call, so writing the
file changes the running process's time at once. Two modes:

- ``wall``: ``FAKETIME_DONT_FAKE_MONOTONIC=1``. Only ``CLOCK_REALTIME`` moves, in either
  direction: an NTP step or a manual change. Timeouts built on monotonic time must not
  notice.
- ``both``: monotonic is faked too, so :meth:`FakeClock.advance_monotonic` moves both
  clocks forward (a suspended VM waking up). Only forward: a monotonic clock that goes
  back is not a fault the relay is asked to survive.

Known libfaketime 0.9.10 limit: in ``wall`` mode ``time.sleep`` fails with EINVAL (its
absolute ``clock_nanosleep`` on CLOCK_MONOTONIC is mis-translated). asyncio, Tornado and
lock timeouts are unaffected (tests/scenarios/test_scenario_faults.py runs an event loop
under it), so the relay must not call ``time.sleep``.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from scenarios.history import History
from scenarios.launch import LaunchMod

LIBFAKETIME_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)

ClockMode = Literal["wall", "both"]


def libfaketime_path() -> str | None:
    for candidate in LIBFAKETIME_CANDIDATES:
        if os.path.exists(candidate):
            return candidate
    return None


def missing() -> str | None:
    """Why clock faults cannot run here, or None when they can."""
    if libfaketime_path() is None:
        hint = "installed" if shutil.which("faketime") else "missing"
        return (
            f"libfaketime.so.1 not found (faketime command {hint}); "
            "install the Debian package 'faketime' (apt-get install faketime)"
        )
    return None


@dataclass
class FakeClock:
    """The offset file of one relay process, and the faults that rewrite it."""

    path: Path
    mode: ClockMode = "wall"
    history: History | None = None
    offset_s: float = 0.0
    jumps: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._write()

    def mod(self) -> LaunchMod:
        lib = libfaketime_path()
        if lib is None:
            raise RuntimeError(missing())
        env = {
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            "FAKETIME_NO_CACHE": "1",
        }
        if self.mode == "wall":
            env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        return LaunchMod(f"faketime-{self.mode}", env=env, preload=(lib,))

    def jump_wall(self, seconds: float) -> None:
        """Step the wall clock by ``seconds`` (either sign); monotonic stays put."""
        if self.mode != "wall":
            raise ValueError("jump_wall needs mode='wall' (monotonic would move along)")
        self._move(seconds, "wall_jump")

    def advance_monotonic(self, seconds: float) -> None:
        """Move monotonic (and wall) time forward by ``seconds``."""
        if self.mode != "both":
            raise ValueError("advance_monotonic needs mode='both'")
        if seconds < 0:
            raise ValueError("monotonic time only moves forward")
        self._move(seconds, "monotonic_advance")

    def _move(self, seconds: float, fault: str) -> None:
        self.offset_s += seconds
        self.jumps.append(seconds)
        self._write()
        if self.history is not None:
            self.history.record(
                "fault", fault=fault, seconds=seconds, offset_s=self.offset_s, mode=self.mode
            )

    def _write(self) -> None:
        # Atomic replace: libfaketime re-reads the file on every call and must never see a
        # half-written offset.
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(f"{self.offset_s:+.6f}\n", encoding="ascii")
        os.replace(tmp, self.path)
