"""SQLite-style countdown: fail I/O number N, for N = 1, 2, … until the operation runs
to completion without reaching its N-th I/O; once with a one-off fault, once persistent.

After every attempt the caller's ``check`` runs (``PRAGMA integrity_check`` plus the
all-or-nothing invariant of the operation). That is how SQLite's own test suite shows
that a failure at *any* I/O leaves a consistent database, and it is the loop later
scenarios use on the relay's cache writes.

:func:`countdown` is mechanism-agnostic: ``attempt(n, persistent)`` sets up the fault,
runs the operation and reports how many faults were actually injected. For a child
process, :func:`strace_attempt` does that with ``strace --inject ...:when=N[+]``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from scenarios import launch
from scenarios.faults.disk import injected_count, strace_mod


@dataclass(frozen=True)
class Attempt:
    n: int
    persistent: bool
    injected: int  # faults that actually fired; 0 means the operation never reached I/O n
    succeeded: bool  # the operation reported success despite (or without) the fault
    detail: str = ""


@dataclass
class CountdownReport:
    persistent: bool
    attempts: list[Attempt] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def completed(self) -> bool:
        """The loop reached an N past the operation's last I/O."""
        return bool(self.attempts) and self.attempts[-1].injected == 0

    def describe(self) -> str:
        kind = "persistent" if self.persistent else "one-off"
        failed = sum(1 for attempt in self.attempts if not attempt.succeeded)
        return (
            f"{kind}: {len(self.attempts)} attempts, {failed} failed operations, "
            f"{len(self.problems)} check problems"
        )


def countdown(
    attempt: Callable[[int, bool], Attempt],
    check: Callable[[Attempt], list[str]],
    *,
    persistent: bool,
    limit: int = 500,
) -> CountdownReport:
    """Run ``attempt`` at N = 1, 2, … until no fault fires; ``check`` after each one."""
    report = CountdownReport(persistent)
    for n in range(1, limit + 1):
        result = attempt(n, persistent)
        report.attempts.append(result)
        report.problems += [
            f"N={n} {'persistent' if persistent else 'one-off'}: {p}" for p in check(result)
        ]
        if result.injected == 0:
            if not result.succeeded:
                report.problems.append(f"N={n}: no fault fired, yet the operation failed")
            return report
    report.problems.append(f"the operation still reached I/O number {limit}; raise the limit")
    return report


def countdown_both(
    attempt: Callable[[int, bool], Attempt],
    check: Callable[[Attempt], list[str]],
    *,
    limit: int = 500,
) -> tuple[CountdownReport, CountdownReport]:
    """The full SQLite recipe: the one-off loop, then the persistent loop."""
    return (
        countdown(attempt, check, persistent=False, limit=limit),
        countdown(attempt, check, persistent=True, limit=limit),
    )


def strace_attempt(
    argv: Sequence[str],
    syscalls: tuple[str, ...],
    workdir: Path,
    *,
    prepare: Callable[[], None] = lambda: None,
    timeout: float = 30.0,
) -> Callable[[int, bool], Attempt]:
    """An ``attempt`` that runs ``argv`` under strace, failing the N-th of ``syscalls``.

    ``prepare`` resets the state before each attempt (restore the database copy). The
    child's exit status 0 means it reported success.
    """

    def run(n: int, persistent: bool) -> Attempt:
        prepare()
        log = workdir / f"strace-{n}-{int(persistent)}.log"
        mod = strace_mod(syscalls, n, persistent=persistent, log=log)
        full_argv, env = launch.apply([mod], list(argv), dict(os.environ))
        result = subprocess.run(
            full_argv, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        injected = injected_count(log)
        log.unlink(missing_ok=True)
        return Attempt(
            n,
            persistent,
            injected,
            result.returncode == 0,
            (result.stdout + result.stderr).strip()[-300:],
        )

    return run
