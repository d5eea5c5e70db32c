"""Finding a tunnel's descendants through /proc (relay.tunnel.process_tree), on real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from relay.tunnel.process_tree import MARK_VARIABLE, Process, left_behind, signal_all

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def test_marked_processes_and_a_trees_descendants_are_found(
    sleepers: list[subprocess.Popen[bytes]],
) -> None:
    marked = subprocess.Popen(SLEEP, env={**os.environ, MARK_VARIABLE: "m-1"})
    other_mark = subprocess.Popen(SLEEP, env={**os.environ, MARK_VARIABLE: "m-2"})
    unmarked = subprocess.Popen(SLEEP, env={})
    sleepers += [marked, other_mark, unmarked]
    found = {process.pid for process in left_behind(None, "m-1")}
    assert marked.pid in found
    assert not found & {other_mark.pid, unmarked.pid, os.getpid()}
    # By ancestry: this process's children, whatever their environment (itself excluded).
    tree = {process.pid for process in left_behind(os.getpid(), "no-such-mark")}
    assert {marked.pid, other_mark.pid, unmarked.pid} <= tree and os.getpid() not in tree


def test_a_process_is_signalled_only_while_it_is_the_one_found(
    sleepers: list[subprocess.Popen[bytes]],
) -> None:
    proc = subprocess.Popen(SLEEP, env={MARK_VARIABLE: "m-3"})
    sleepers.append(proc)
    (found,) = left_behind(None, "m-3")
    assert found.pid == proc.pid
    assert signal_all([Process(proc.pid, found.start + 1)], signal.SIGKILL) == 0  # reused pid
    assert proc.poll() is None
    assert signal_all([found], signal.SIGKILL) == 1
    assert proc.wait(10) == -signal.SIGKILL
    assert signal_all([found], signal.SIGKILL) == 0  # gone
