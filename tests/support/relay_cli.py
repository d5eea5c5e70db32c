"""``relay`` as a real process, for the tests of its command line: a clean environment,
``relay serve`` that is always killed and reaped, and its output handed to the suite's log
scan (tests/support/log_leaks.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
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
    *,
    argv: Sequence[str] = (sys.executable, "-m", "relay", "serve"),
    cwd: Path | None = None,
) -> Iterator[subprocess.Popen[str]]:
    """``relay serve`` (or another spelling of it, ``argv``) as a real process; killed (and
    reaped) however the test ends. What the test did not read itself goes to the log scan
    under ``label``."""
    with subprocess.Popen(
        list(argv),
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            yield proc
        finally:
            proc.kill()
            proc.wait()
            rest = [p.read() for p in (proc.stdout, proc.stderr) if p is not None and not p.closed]
            observe_process(label, "".join(rest), env)
