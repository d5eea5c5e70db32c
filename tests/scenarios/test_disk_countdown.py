"""The SQLite-style EIO countdown over every write of a cached request's lifecycle.

A real relay (``python -m relay serve``, cache on) runs under ``strace --inject``: the
N-th ``pwrite64`` and the N-th ``fdatasync`` fail with EIO (once, or from then on), for
N = 1, 2, ... until a run completes with no fault injected. Each run is startup, one
cached request (dispatch intent, observation and payload, resolution) and a graceful
stop; a persistent run sends a second request. After every run, with the relay stopped:

- ``PRAGMA integrity_check`` is ok;
- never an unsafe forward: a request that reached the upstream left a safety record in
  the store at its position (an observation, a start poison, or an intent that recovery
  will poison);
- 503 only where required: a 503 reached nothing upstream, and a request failed only
  once the cache had latched (one-off faults are absorbed by the reserve and the retry);
- the ``.guard`` latch after repeated safety failure: once a guard exists, the second
  request gets 503 and nothing more reaches the upstream.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import quote

import pytest

from scenarios.client import chat
from scenarios.faults.countdown import Attempt, CountdownReport, countdown
from scenarios.faults.disk import injected_count, integrity_check, strace_missing, strace_mod
from scenarios.procs import StartupError
from scenarios.runner import Harness, RelayOptions
from scenarios.seed import Seed

pytestmark = [pytest.mark.scenario, pytest.mark.slow]

SYSCALLS = ("pwrite64", "fdatasync")
CACHE = RelayOptions(cache_enabled=True, idle_timeout_ms=2_000)


@dataclass
class Run:
    """What one attempt saw."""

    started: bool
    statuses: list[int | None]  # per request: the client's HTTP status
    outcomes: list[str]
    forwarded: list[int]  # per request: upstream calls it caused
    latched_before: list[bool]  # per request: whether the .guard existed when it was sent
    guard: bool
    stderr: str


def body(k: int) -> dict[str, object]:
    """Request ``k`` opens its own conversation whose answer sits at position ``k + 1``."""
    system = [{"role": "system", "content": f"system {i}"} for i in range(k)]
    return {"model": "gpt-5", "stream": True,
            "messages": [*system, {"role": "user", "content": f"countdown {k}"}]}  # fmt: skip


class Countdown:
    """One fake upstream for every attempt; each attempt starts from the same store,
    created once without faults (so N counts the writes of a restart and a request, not
    of creating the schema)."""

    def __init__(self, harness: Harness) -> None:
        self.h = harness
        self.h.start_fake()
        self.runs: dict[tuple[int, bool], Run] = {}
        self.h.start_relay(CACHE)
        self.h.stop_relay()
        self.pristine = self.h.tmp / "pristine"
        shutil.copytree(self.h.data_dir, self.pristine)

    def upstream_calls(self) -> int:
        assert self.h.fake is not None
        return int(self.h.fake.health()["requests"])

    def attempt(self, n: int, persistent: bool) -> Attempt:
        h = self.h
        shutil.rmtree(h.data_dir)
        shutil.copytree(self.pristine, h.data_dir)
        log = h.faults_dir / f"strace-{n}-{int(persistent)}.log"
        mod = strace_mod(SYSCALLS, n, persistent=persistent, log=log)
        options = replace(CACHE, mods=(mod,))
        run = Run(False, [], [], [], [], False, "")
        guard = h.cache_path.with_name(h.cache_path.name + ".guard")
        try:
            relay = h.start_relay(options)
        except StartupError as err:
            run.stderr = str(err)[-400:]
        else:
            run.started = True
            for k in range(2 if persistent else 1):
                before = self.upstream_calls()
                run.latched_before.append(guard.exists())
                answer = chat(relay.base_url, h.relay_token, body(k))
                run.statuses.append(answer.status)
                run.outcomes.append(answer.outcome)
                run.forwarded.append(self.upstream_calls() - before)
            h.stop_relay()
            run.stderr = relay.proc.stderr_text()[-400:]
        run.guard = guard.exists()
        self.runs[(n, persistent)] = run
        injected = injected_count(log)
        succeeded = run.started and all(o == "success" for o in run.outcomes)
        return Attempt(n, persistent, injected, succeeded, run.stderr)

    def check(self, attempt: Attempt) -> list[str]:
        run = self.runs[(attempt.n, attempt.persistent)]
        path = self.h.cache_path
        problems: list[str] = []
        if path.exists() and (verdict := integrity_check(path)) != "ok":
            problems.append(f"integrity_check: {verdict}")
        if not run.started:
            if not any(
                m in run.stderr for m in ("cannot open the reasoning cache", "cannot start")
            ):
                problems.append(f"startup failed without its one-line reason: {run.stderr}")
            return problems
        for k, (status, forwarded) in enumerate(zip(run.statuses, run.forwarded, strict=True)):
            if status == 503 and forwarded:
                problems.append(f"request {k}: 503 yet forwarded {forwarded} time(s)")
            if forwarded > 1:
                problems.append(f"request {k}: sent upstream {forwarded} times (a resend)")
            if forwarded and not safety_record_at(path, position=k + 1):
                problems.append(f"request {k}: forwarded with no safety record in the store")
        failed = [o for o in run.outcomes if o != "success"]
        if failed and not run.guard:
            problems.append(f"a request failed ({failed}) but the cache did not latch")
        latched = run.latched_before[1:] and run.latched_before[1]
        if latched and (run.statuses[1] != 503 or run.forwarded[1]):
            problems.append(
                f"latched, yet the next request got {run.statuses[1]} and was forwarded "
                f"{run.forwarded[1]} time(s)"
            )
        return problems


def safety_record_at(path: Path, *, position: int) -> bool:
    """An observation, a start poison or an unresolved intent at ``position`` (each
    request here has a position of its own)."""
    if not path.exists():
        return False
    conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
    try:
        found = conn.execute(
            "SELECT (SELECT count(*) FROM observations WHERE position = ?)"
            " + (SELECT count(*) FROM markers WHERE kind = 'start_poison' AND position = ?)"
            " + (SELECT count(*) FROM intents WHERE position = ?)",
            (position, position, position),
        ).fetchone()[0]
    finally:
        conn.close()
        Path(f"{path}-shm").unlink(missing_ok=True)
    return bool(found)


@pytest.fixture
def countdown_rig(seed: Seed) -> Iterator[Countdown]:
    if (reason := strace_missing()) is not None:
        pytest.skip(reason)
    with Harness("disk_countdown", seed) as harness:
        yield Countdown(harness)


@pytest.mark.parametrize("persistent", [False, True], ids=["once", "persistent"])
def test_eio_at_every_write_of_a_request(countdown_rig: Countdown, persistent: bool) -> None:
    report: CountdownReport = countdown(
        countdown_rig.attempt, countdown_rig.check, persistent=persistent, limit=200
    )
    runs = countdown_rig.runs.values()
    latched = sum(run.guard for run in runs)
    print(
        f"\n{report.describe()}; relay started in {sum(r.started for r in runs)}, "
        f"latched in {latched}, 503s {sum(r.statuses.count(503) for r in runs)}"
    )
    assert report.completed, report.describe()
    assert report.problems == [], "\n".join(report.problems)
    assert len(report.attempts) > 10, "the lifecycle did fewer writes than expected"
    assert any(run.started and run.statuses for run in runs)
    if persistent:
        assert latched > 0, "a persistent fault never latched the cache"
