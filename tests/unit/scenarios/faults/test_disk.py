"""The stale-mount sweep: which scenario temp dirs it may unmount."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from scenarios.faults import disk
from scenarios.faults.disk import MOUNT_MARKER, stale_mount_points, temp_prefix


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: the pid names no process now (reuse within a test is negligible)
    return child.pid


def test_the_temp_prefix_names_this_process() -> None:
    assert temp_prefix() == f"{MOUNT_MARKER}{os.getpid()}-"


# "{pid}" is this process's pid, filled in by the test: the ids must not hold it (pytest-xdist
# workers, each with its own pid, must collect the same ids).
@pytest.mark.parametrize(
    ("name", "alive"),
    [
        ("{pid}-abc", True),  # a run still going: never swept
        ("{pid}-disk-safety-xyz", True),
        ("1-abc", True),  # init: alive (and not ours, which must not matter)
        ("abc123", False),  # no pid: a dir from before pids were in the name
        ("", False),
    ],
)
def test_owner_alive(name: str, alive: bool) -> None:
    assert disk._owner_alive(name.replace("{pid}", str(os.getpid()))) is alive


def test_a_dead_owner_is_not_alive() -> None:
    assert disk._owner_alive(f"{dead_pid()}-abc") is False


def test_the_sweep_unmounts_only_the_dead_runs_mounts_innermost_first() -> None:
    root = "/tmp"
    live = f"{root}/{temp_prefix()}live/data"
    dead = f"{root}/{MOUNT_MARKER}{dead_pid()}-gone"
    points = [dead, live, f"{dead}/data/inner", f"{root}/elsewhere/data", "/proc"]
    assert stale_mount_points(points, root) == [f"{dead}/data/inner", dead]
