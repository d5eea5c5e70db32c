"""Run a :class:`~scenarios.dsl.Scenario` against real processes, then check the history.

:func:`play` starts the fake and the relay (under the scenario's clock, disk and libfiu
faults), runs the steps in order, stops at the first failed expectation, runs the history
checks, and always cleans up. A failure raises :class:`ScenarioFailed` whose message holds
the transcript with the failing step marked, the seed, a one-line replay command and the
kept run directory.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path

from scenarios.checker import CheckReport, check_history
from scenarios.core import Action, Ctx, Expectation
from scenarios.dsl import Scenario
from scenarios.faults.clock import FakeClock
from scenarios.faults.disk import TmpfsMount, fiu_mod
from scenarios.history import History
from scenarios.runner import Harness
from scenarios.seed import Seed, replay_command


class ScenarioFailed(AssertionError):
    pass


@dataclass
class PlayResult:
    scenario: str
    seed: int
    report: CheckReport
    history: History
    run_dir: Path
    problems: list[str] = field(default_factory=list)
    timings: list[tuple[str, float]] = field(default_factory=list)  # (step, seconds)


def play(
    scenario: Scenario,
    seed: Seed,
    *,
    target: str | None = None,
    keep: bool = False,
    keep_on_failure: bool = True,
) -> PlayResult:
    """Run ``scenario``; ``keep`` keeps the run directory always, ``keep_on_failure`` (the
    default) only when it fails (a known, expected failure need not litter /tmp)."""
    harness = Harness(scenario.name, seed, keep=keep, keep_on_failure=keep_on_failure)
    ctx = Ctx(harness=harness, seed=seed)
    failure: str | None = None
    report = CheckReport()
    position = -1
    timings: list[tuple[str, float]] = []
    try:
        started = time.monotonic()
        _start(scenario, ctx)
        timings.append(("start processes", time.monotonic() - started))
        for index, step in enumerate(scenario.steps):
            position = index  # kept for the transcript if this step fails
            started = time.monotonic()
            if isinstance(step, Action):
                step.run(ctx)
            elif isinstance(step, Expectation):
                step.check(ctx)
            timings.append((step.describe(), time.monotonic() - started))
        position = len(scenario.steps)
        harness.sync_upstream()
        report = check_history(harness.history, scenario.checks)
        if not report.ok:
            failure = report.describe()
    except Exception as exc:  # every failure ends in one report with the seed
        failure = f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, AssertionError):
            failure += "\n" + traceback.format_exc(limit=6)
    finally:
        if failure is not None:
            harness.failed = True
        with contextlib.suppress(Exception):
            _close_held_streams(ctx)
        problems = harness.close()
    if problems:
        failure = (failure + "\n" if failure else "") + "cleanup: " + "; ".join(problems)
    result = PlayResult(
        scenario.name, seed.value, report, harness.history, harness.tmp, problems, timings
    )
    if failure is not None:
        command = replay_command(seed.value, target or scenario.name)
        raise ScenarioFailed(
            f"scenario {scenario.name} failed: {failure}\n\n"
            f"{scenario.transcript(upto=position, mark='!!')}\n\n"
            f"seed {seed.value}; replay with:\n  {command}\n"
            f"run directory (logs, history.jsonl): {harness.tmp}"
        )
    return result


def _start(scenario: Scenario, ctx: Ctx) -> None:
    harness = ctx.harness
    options = scenario.relay
    mods = list(options.mods)
    if scenario.clock is not None:
        ctx.clock = FakeClock(harness.faults_dir / "faketime", scenario.clock, harness.history)
        mods.append(ctx.clock.mod())
    if scenario.fiu:
        ctx.fiu_prefix = harness.faults_dir / "fiu-ctrl"
        mods.append(fiu_mod(ctx.fiu_prefix))
    if scenario.tmpfs_bytes is not None:
        ctx.tmpfs = TmpfsMount(harness.data_dir, scenario.tmpfs_bytes, harness.history)
        harness.on_close("unmount tmpfs", ctx.tmpfs.unmount)
        ctx.tmpfs.mount()
    harness.start_fake()
    harness.start_relay(replace(options, mods=tuple(mods)))


def _close_held_streams(ctx: Ctx) -> None:
    for turn in ctx.turns.values():
        if turn.conn is not None:
            turn.conn.close()
