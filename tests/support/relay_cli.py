"""``relay`` as a real process, for the tests of its command line: a clean environment,
``relay serve`` that is always killed and reaped, and its output handed to the suite's log
scan (tests/support/log_leaks.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.log_leaks import observe_process


def relay_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This environment without the developer's OPENAI_*/RELAY_* settings, on a free port,
    with its data under ``tmp_path/data``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RELAY_"))}
    return {**env, "RELAY_PORT": "0", "RELAY_DATA_DIR": str(tmp_path / "data"), **extra}


@contextmanager
def serving(
    env: dict[str, str],
    label: str,
    *args: str,
    cwd: Path | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> Iterator[subprocess.Popen[str]]:
    """``relay serve [args]`` as a real process; killed (and reaped) however the test ends.
    What the test did not read itself goes to the log scan under ``label``. ``preexec_fn``
    runs in the child before the relay starts (e.g. to lower a resource limit)."""
    with subprocess.Popen(
        [sys.executable, "-m", "relay", "serve", *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec_fn,  # noqa: PLW1509 - a test's resource limit, set before exec
    ) as proc:
        try:
            yield proc
        finally:
            proc.kill()
            proc.wait()
            rest = [p.read() for p in (proc.stdout, proc.stderr) if p is not None and not p.closed]
            observe_process(label, "".join(rest), env)


def banner(proc: subprocess.Popen[str]) -> list[str]:
    """The startup banner's lines (without their newlines): up to the admin socket's line,
    which ``relay_env``'s relays print last (no metrics port, no LOG_BODIES)."""
    assert proc.stdout is not None
    lines: list[str] = []
    while not lines or not lines[-1].startswith("admin socket:"):
        line = proc.stdout.readline()
        assert line, f"relay serve ended its output after {lines}"
        lines.append(line.rstrip("\n"))
    return lines


def run_relay(
    *args: str, env: dict[str, str], cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``relay <args>`` to completion (a one-shot command, or a ``serve`` that fails)."""
    return subprocess.run(
        [sys.executable, "-m", "relay", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
