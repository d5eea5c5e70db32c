"""Real subprocesses the harness owns: start, wait for a banner, kill -9, stop, reap.

Each child runs in its own session (``start_new_session=True``), so its pid is also its
process-group id and a kill reaches everything it spawned (wrappers such as strace
included). Every started process is registered; :func:`reap_all` (also run at interpreter
exit) kills whatever is left, so an aborted test run leaves no stray process behind.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from scenarios.wait import WaitTimeout, wait_until

_LIVE: dict[int, ManagedProcess] = {}
# Told once about each process after it has exited, while its log files still exist
# (the test suite scans every relay's output for secrets: tests/support/log_leaks.py).
EXIT_OBSERVERS: list[Callable[[ManagedProcess], None]] = []


class StartupError(RuntimeError):
    """A child exited or stayed silent before printing its ready banner."""


class ManagedProcess:
    def __init__(
        self,
        role: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        log_dir: Path,
        label: str,
        cwd: Path | None = None,
    ) -> None:
        self.role = role
        self.argv = list(argv)
        self.env = dict(env)
        self.cwd = cwd
        self.stdout_path = log_dir / f"{label}.stdout"
        self.stderr_path = log_dir / f"{label}.stderr"
        self.exit_cause: str | None = None  # set when the harness itself ends the process
        self.exit_recorded = False
        self._observed = False
        self._popen: subprocess.Popen[bytes] | None = None

    # --- lifecycle ---------------------------------------------------------------------

    def start(self, ready_pattern: str, timeout: float = 20.0) -> re.Match[str]:
        """Start and wait for a stdout line matching ``ready_pattern``; return its match."""
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self._popen = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        _LIVE[self._popen.pid] = self
        pattern = re.compile(ready_pattern, re.MULTILINE)

        def ready() -> re.Match[str] | None:
            match = pattern.search(self.stdout_text())
            if match is None and not self.alive:
                raise StartupError(
                    f"{self.role} exited with {self.returncode} before it was ready:\n"
                    + self.stderr_tail()
                )
            return match

        try:
            return wait_until(ready, timeout=timeout, what=f"{self.role} banner {ready_pattern!r}")
        except WaitTimeout:
            self.kill9("harness_kill")
            raise StartupError(
                f"{self.role} printed no ready banner in {timeout:g}s:\n" + self.stderr_tail()
            ) from None

    @property
    def pid(self) -> int:
        assert self._popen is not None, "process not started"
        return self._popen.pid

    @property
    def alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self._popen is None else self._popen.poll()

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def kill9(self, cause: str = "harness_kill") -> int:
        """SIGKILL the whole process group and reap it."""
        if self._popen is None:
            return 0
        if self.alive and self.exit_cause is None:
            self.exit_cause = cause
        self.signal_group(signal.SIGKILL)
        code = self._popen.wait(timeout=10)
        _LIVE.pop(self.pid, None)
        self._ended()
        return code

    def stop(self, timeout: float = 5.0) -> int:
        """SIGTERM (graceful stop), then SIGKILL if it does not exit in time."""
        if self._popen is None:
            return 0
        if self.alive and self.exit_cause is None:
            self.exit_cause = "harness_stop"
        self.signal_group(signal.SIGTERM)
        try:
            code = self._popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = self.kill9("harness_kill")
        self.signal_group(signal.SIGKILL)  # anything it left in its group
        _LIVE.pop(self.pid, None)
        self._ended()
        return code

    def wait_exit(self, timeout: float) -> int:
        assert self._popen is not None
        code = self._popen.wait(timeout=timeout)
        self.signal_group(signal.SIGKILL)
        _LIVE.pop(self.pid, None)
        self._ended()
        return code

    def _ended(self) -> None:
        if not self._observed:
            self._observed = True
            for observer in EXIT_OBSERVERS:
                observer(self)

    # --- logs -----------------------------------------------------------------------------

    def stdout_text(self) -> str:
        return _read(self.stdout_path)

    def stderr_text(self) -> str:
        return _read(self.stderr_path)

    def stderr_tail(self, lines: int = 30) -> str:
        return "\n".join(self.stderr_text().splitlines()[-lines:])

    def wait_for_stderr(self, pattern: str, timeout: float, start: int = 0) -> re.Match[str]:
        """Wait for a stderr line (from byte offset ``start``) matching ``pattern``."""
        compiled = re.compile(pattern, re.MULTILINE)

        def probe() -> re.Match[str] | None:
            return compiled.search(self.stderr_text(), start)

        return wait_until(probe, timeout=timeout, what=f"{self.role} log line {pattern!r}")

    def stderr_size(self) -> int:
        try:
            return self.stderr_path.stat().st_size
        except FileNotFoundError:
            return 0


def _read(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def group_alive(pgid: int) -> bool:
    """Whether any process is left in this process group."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def processes_with_marker(marker: str) -> list[int]:
    """Pids whose environment carries ``SCENARIO_RUN_MARKER=<marker>``.

    This finds children even if one escaped its process group (a daemonising wrapper):
    the marker is inherited through every fork and exec.
    """
    needle = f"SCENARIO_RUN_MARKER={marker}".encode()
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text()
        except OSError:
            continue
        # A zombie keeps its environ until reaped; it is not a running stray.
        if needle in environ.split(b"\0") and ") Z " not in state:
            found.append(int(entry.name))
    return found


def reap_all() -> None:
    """Kill every registered child still running (atexit and test finalizers)."""
    for proc in list(_LIVE.values()):
        with contextlib.suppress(Exception):
            proc.kill9("harness_kill")
    _LIVE.clear()


def live_processes() -> list[ManagedProcess]:
    return [proc for proc in _LIVE.values() if proc.alive]


atexit.register(reap_all)
