"""relay.ops.token_stats: counting is in memory, flushing writes hourly rows (on a worker
thread from the loop's timer), windows read stored plus pending, and a failing database is
logged once and never raises."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.app.runtime import TokenRecorder
from relay.clock import ManualClock
from relay.core.token_usage import HOUR_S, HourDelta, Key, Price, Usage
from relay.ops import hooks
from relay.ops.token_stats import TokenAccounting, token_accounting
from relay.storage.stats_db import FILE_NAME, StatsDB
from tests.support.ops_runtime import ops_runtime

USAGE = Usage(input_tokens=2000, cached_tokens=1500, output_tokens=100, reasoning_tokens=60)
COLD = Usage(input_tokens=2000, cached_tokens=0, output_tokens=100, reasoning_tokens=40)


def accounting(tmp_path: Path, clock: ManualClock, **kwargs: object) -> TokenAccounting:
    return TokenAccounting.open(clock, tmp_path / "reasoning-cache.sqlite",
                                retention_days=90, **kwargs)  # type: ignore[arg-type]  # fmt: skip


def test_answers_count_since_start_and_in_windows(tmp_path: Path) -> None:
    clock = ManualClock()
    stats = accounting(tmp_path, clock)
    stats.answered("chat", "gpt-5", "replayed=2", USAGE)
    stats.answered("chat", "gpt-5", "none; reason=nothing_to_replay", COLD)
    stats.answered("responses", "gpt-5", "none; reason=responses_passthrough", None)
    stats.added_latency(0.004)
    since = {(k.shape, k.outcome): t for k, t in stats.since_start.by_key.items()}
    assert since["chat", "replayed"].blocks == 2
    assert since["responses", "bypass_fenced"].answers == 0
    report = stats.report()  # pending only: nothing flushed yet
    hour = report["lastHour"]
    assert hour["withReplay"]["share"] == 0.75
    assert hour["withoutReplay"]["share"] == 0.0
    assert hour["reasoningTokens"] == 100
    assert hour["addedLatency"] == {"count": 1, "p50Ms": 5, "p95Ms": 5}
    assert hour["estimate"] is None
    stats.flush_now()
    assert stats.report()["lastHour"] == hour  # the same figures, now from the database
    clock.advance(2 * HOUR_S)
    later = stats.report()
    assert later["lastHour"]["requests"] == 0
    assert later["lastDay"]["requests"] == 3
    assert later["last30Days"]["requests"] == 3
    clock.advance(31 * 24 * HOUR_S)
    assert stats.report()["last30Days"]["requests"] == 0
    asyncio.run(stats.stop())


def test_rejections_and_fences_are_sampled_per_hour(tmp_path: Path) -> None:
    clock = ManualClock()
    totals: Counter[tuple[str, str]] = Counter()
    stats = accounting(tmp_path, clock, counters=lambda: dict(totals))
    totals["fenced", "direct_responses"] += 2
    stats.flush_now()
    clock.advance(HOUR_S)
    totals["fenced", "direct_responses"] += 1
    totals["rejected", "invalid_encrypted_content"] += 1
    stats.flush_now()
    report = stats.report()
    assert report["lastHour"]["events"] == {
        "fenced": {"direct_responses": 1}, "rejected": {"invalid_encrypted_content": 1},
    }  # fmt: skip
    assert report["lastDay"]["events"]["fenced"] == {"direct_responses": 3}
    asyncio.run(stats.stop())


def test_prices_give_an_estimate(tmp_path: Path) -> None:
    stats = accounting(tmp_path, ManualClock(),
                       prices={"gpt-5": Price(input=1.0, cached_input=0.1, output=10.0)})  # fmt: skip
    stats.answered("chat", "gpt-5", "replayed=1", USAGE)
    stats.answered("chat", "gpt-5", "off", COLD)
    estimate = stats.report()["lastHour"]["estimate"]
    assert estimate["models"] == ["gpt-5"]
    assert estimate["saving"] == pytest.approx(1500 * 0.9 / 1e6)
    asyncio.run(stats.stop())


def test_retention_zero_keeps_nothing_on_disk(tmp_path: Path) -> None:
    clock = ManualClock()
    stats = TokenAccounting.open(clock, tmp_path / "store.sqlite", retention_days=0)
    stats.answered("chat", "gpt-5", "off", COLD)
    stats.flush_now()
    assert stats.db is None and not (tmp_path / FILE_NAME).exists()
    assert stats.report()["lastDay"]["requests"] == 1
    asyncio.run(stats.stop())


def test_old_hours_are_pruned_at_the_next_write(tmp_path: Path) -> None:
    clock = ManualClock()
    stats = TokenAccounting.open(clock, tmp_path / "s.sqlite", retention_days=1)
    stats.answered("chat", "gpt-5", "off", COLD)
    stats.flush_now()
    clock.advance(25 * HOUR_S)
    stats.flush_now()
    assert stats.db is not None
    assert stats.db.since(0).tallies.by_key == {}
    asyncio.run(stats.stop())


class Broken(StatsDB):
    def add(self, delta: HourDelta) -> None:
        raise sqlite3.OperationalError("disk I/O error")


def test_a_failing_database_is_logged_once_and_never_raises(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stats = TokenAccounting(ManualClock(), Broken(tmp_path / FILE_NAME), retention_days=90)
    with caplog.at_level(logging.INFO, logger="relay"):
        for _ in range(3):
            stats.answered("chat", "gpt-5", "off", COLD)
            stats.flush_now()
    assert caplog.text.count("stats_write_failed") == 1
    asyncio.run(stats.stop())


def test_the_timer_flushes_on_a_worker_thread(tmp_path: Path) -> None:
    clock = ManualClock()
    stats = TokenAccounting(clock, StatsDB(tmp_path / FILE_NAME), retention_days=90,
                            flush_every_s=0.001)  # fmt: skip
    assert stats.db is not None
    db = stats.db

    async def run() -> None:
        written = asyncio.Event()
        loop = asyncio.get_running_loop()
        add = db.add

        def add_then_signal(delta: HourDelta) -> None:  # on the worker thread
            add(delta)
            loop.call_soon_threadsafe(written.set)

        db.add = add_then_signal  # type: ignore[method-assign]
        stats.start()
        stats.answered("chat", "gpt-5", "replayed=1", USAGE)
        await written.wait()
        await stats.stop()

    asyncio.run(asyncio.wait_for(run(), timeout=10))
    reopened = StatsDB(tmp_path / FILE_NAME)
    [(key, tally)] = reopened.since(0).tallies.by_key.items()
    assert key == Key(key.hour, "chat", "gpt-5", "replayed") and tally.cached_tokens == 1500
    reopened.close()


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(
                st.just("answer"),
                st.sampled_from(["replayed=2", "off", "none; reason=capacity_bypass"]),
                st.integers(0, 5000),
            ),
            st.tuples(st.just("flush"), st.just(""), st.just(0)),
            st.tuples(st.just("later"), st.just(""), st.integers(1, 7200)),
        ),
        max_size=25,
    )
)
def test_windows_do_not_depend_on_when_flushes_happen(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, str, int]]
) -> None:
    """Whatever the flush points, the 30-day window holds every answer exactly once."""
    clock = ManualClock()
    db = StatsDB(tmp_path_factory.mktemp("stats") / FILE_NAME)
    stats = TokenAccounting(clock, db, retention_days=90)
    for step, header, n in steps:
        if step == "answer":
            stats.answered("chat", "gpt-5", header, Usage(input_tokens=n, cached_tokens=n // 2))
        elif step == "flush":
            stats.flush_now()
        else:
            clock.advance(n)
    month = stats.report()["last30Days"]
    answers = [(h, n) for step, h, n in steps if step == "answer"]
    assert month["requests"] == len(answers)
    assert month["inputTokens"] == sum(n for _, n in answers)
    assert month["withReplay"]["input"] == sum(n for h, n in answers if h == "replayed=2")
    assert month["replayedBlocks"] == 2 * sum(1 for h, _ in answers if h == "replayed=2")
    asyncio.run(stats.stop())


class Recorder:
    """A TokenRecorder that keeps what it was told."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    def answered(self, shape: str, model: object, header: str | None, usage: Usage | None) -> None:
        self.calls.append(("answered", shape, model, header, usage))

    def added_latency(self, seconds: float) -> None:
        self.calls.append(("added_latency", seconds))


def test_the_request_shell_records_through_the_runtimes_token_recorder(tmp_path: Path) -> None:
    """The runtime knows token accounting only as a TokenRecorder (relay.app.runtime):
    the request shell's hooks need nothing more; operations' reads ask for the
    TokenAccounting they made (``token_accounting``) and refuse anything else."""
    recorder = Recorder()
    typed: TokenRecorder = recorder  # mypy checks the structure
    with ops_runtime(tmp_path) as ops:
        ops.runtime.tokens = typed
        hooks.answer_finished(ops.runtime, "chat", "gpt-5", "replayed=1", Usage(100, 80))
        hooks.first_byte(ops.runtime, 0.75, 0.5)
        hooks.first_byte(ops.runtime, 0.75, None)  # nothing went upstream: no share
        assert recorder.calls == [
            ("answered", "chat", "gpt-5", "replayed=1", Usage(100, 80)),
            ("added_latency", 0.25),
        ]
        with pytest.raises(AssertionError):
            token_accounting(ops.runtime)
        ops.runtime.tokens = None
        assert token_accounting(ops.runtime) is None
        made = ops.runtime.tokens = TokenAccounting(ops.clock, None, retention_days=0)
        assert token_accounting(ops.runtime) is made
