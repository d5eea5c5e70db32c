"""One acceptance run: the upstream (real, or the fake as a subprocess), an optional
cassette recorder in front of it, every selected check in order, the summary.

Checks run one after another, each with its own relays. When the budget is spent the
check that hit it fails with that reason and the rest are reported as ``not_run``.
"""

from __future__ import annotations

import contextlib
import importlib
import secrets
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TextIO, cast

from live.budget import Budget, BudgetExhausted
from live.checks import Check, all_checks
from live.context import CheckContext, RunEnv
from live.processes import FakeProcess
from live.report import CheckResult, RunReport, render_table, replay_count
from live.settings import (
    OFFLINE_KEY,
    OFFLINE_PROVIDER_KEY,
    Settings,
    StrictProvider,
    offline_strict_provider,
)
from live.verdict import CheckFailed, Verdict
from scenarios.procs import StartupError

Recorder = Callable[..., AbstractContextManager[str]]


def select_checks(only: tuple[str, ...]) -> list[Check]:
    checks = all_checks()
    if not only:
        return checks
    known = {c.name for c in checks}
    unknown = [name for name in only if name not in known]
    if unknown:
        raise ValueError(f"unknown check(s) {unknown}; known: {', '.join(sorted(known))}")
    return [c for c in checks if c.name in only]


def load_recorder() -> Recorder:
    """``live.cassettes.record_cassettes``, imported only when ``--record`` is given."""
    module = importlib.import_module("live.cassettes")
    return cast(Recorder, module.record_cassettes)


def run(settings: Settings, out: TextIO = sys.stdout) -> RunReport:
    checks = select_checks(settings.only)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    name = f"{settings.mode}-{stamp}"
    log_dir = settings.results_dir / f"{name}-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    report = RunReport(
        mode=settings.mode,
        model=settings.model,
        seed=settings.seed,
        max_requests=settings.max_requests,
        max_tokens=settings.max_tokens,
        log_dir=log_dir,
    )
    budget = Budget(settings.max_requests, settings.max_tokens)
    with (
        tempfile.TemporaryDirectory(prefix="relay-live-") as work,
        _upstream(settings, log_dir, Path(work), budget) as env,
    ):
        print(
            f"{settings.mode} acceptance run: model {settings.model}, seed {settings.seed}, "
            f"upstream {env.direct_base_url}, logs in {log_dir}",
            file=out,
            flush=True,
        )
        for index, check in enumerate(checks, start=1):
            if budget.stopped is not None:
                report.results.append(
                    CheckResult(check.name, check.title, "not_run", budget.stopped)
                )
                continue
            result = run_check(check, env)
            report.results.append(result)
            print(
                f"[{index:2}/{len(checks)}] {check.name}: {result.status} "
                f"({len(result.requests)} requests, {result.tokens} tokens, "
                f"{result.seconds:.1f}s) {result.reason}",
                file=out,
                flush=True,
            )
    report.budget_stop = budget.stopped
    report.write_json(settings.results_dir / f"{name}.json")
    print("", file=out)
    print(render_table(report), file=out)
    print(f"results: {report.json_path}", file=out, flush=True)
    return report


@contextlib.contextmanager
def _upstream(
    settings: Settings, log_dir: Path, work_dir: Path, budget: Budget
) -> Iterator[RunEnv]:
    with contextlib.ExitStack() as stack:
        fake = None
        strict: StrictProvider | None
        if settings.offline:
            fake = FakeProcess(log_dir, [OFFLINE_KEY, OFFLINE_PROVIDER_KEY], secrets.token_hex(32))
            stack.callback(fake.stop)
            fake.start()
            base_url, api_key = fake.base_url, OFFLINE_KEY
            strict = offline_strict_provider(fake.base_url)
        else:
            base_url, api_key, strict = settings.base_url, settings.api_key, settings.strict
        relay_upstream = base_url
        if settings.record_dir is not None:
            recorder = load_recorder()
            relay_upstream = stack.enter_context(
                recorder(base_url, settings.record_dir, shareable=settings.shareable)
            )
        yield RunEnv(
            settings=settings,
            upstream_base_url=relay_upstream,
            direct_base_url=base_url,
            api_key=api_key,
            work_dir=work_dir,
            log_dir=log_dir,
            budget=budget,
            fake=fake,
            strict=strict,
        )


def run_check(check: Check, env: RunEnv) -> CheckResult:
    started = time.monotonic()
    ctx = CheckContext(check.name, env)
    try:
        verdict = check.run(ctx)
    except CheckFailed as failure:
        verdict = Verdict("failed", failure.reason)
    except BudgetExhausted as stop:
        verdict = Verdict("failed", f"stopped by the budget: {stop}")
    except StartupError as error:
        verdict = Verdict("failed", f"a relay did not start: {error}")
    except Exception as error:  # a harness fault must not end the run; it fails the check
        trace = env.log_dir / f"{check.name}.traceback.txt"
        trace.write_text(traceback.format_exc(), encoding="utf-8")
        verdict = Verdict("failed", f"harness error {type(error).__name__}: {error} (see {trace})")
    finally:
        ctx.close()
    return CheckResult(
        name=check.name,
        title=check.title,
        status=verdict.status,
        reason=verdict.reason,
        seconds=time.monotonic() - started,
        requests=list(ctx.ledger.records),
        replay=replay_count(ctx.relays),
    )
