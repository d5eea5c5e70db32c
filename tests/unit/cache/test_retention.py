"""Retention in the running cache (relay.cache.retention) over real SQLite files: which
requests touch which payloads, the clock that feeds the deletion barrier, and cleanup
runs on the event loop."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.cache.retention import RetentionCleanup, WatchedClock
from relay.clock import ManualClock
from relay.core.deletion_barrier import BARRIER_S, BarrierStart
from relay.core.receipts import Reason
from relay.core.records import TOUCH_GRANULARITY_S
from relay.storage.replay_store import ReasoningStore
from tests.support import replay_driver as sm

DAY = 86_400.0


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[sm.Relay]:
    opened = sm.Relay(tmp_path / "cache.sqlite", ManualClock())
    yield opened
    opened.close()


def touched(relay: sm.Relay, observation_id: int) -> float:
    payload = relay.store.load_payload(observation_id, max_bytes=1 << 20)
    assert payload is not None
    return payload.touched_at


def first_record(relay: sm.Relay) -> int:
    """The record of the first answer these tests give, "one" to "hi"."""
    scope_id = relay.scope_id()
    assert scope_id is not None
    end = relay.digests((sm.user("hi"), sm.said("one"))).boundaries[-1]
    (record,) = relay.store.observations_ending_at(scope_id, [end])[end]
    return record.id


# --- touches ---------------------------------------------------------------------------------


def test_a_bypassed_request_touches_nothing(relay: sm.Relay) -> None:
    u0 = sm.user("hi")
    sm.answer(relay, (u0,), "one", 1)
    block = first_record(relay)
    admitted_at = relay.clock.wall()
    relay.clock.advance(DAY)
    held = [relay.session((sm.user(f"other {k}"),)) for k in range(sm.MAX_CONCURRENT)]
    follow = (u0, sm.said("one"), sm.user("more"))
    assert relay.begin(follow) is None  # no session to spare: served uncached
    assert touched(relay, block) == admitted_at
    for session in held:
        session.abort("test")
    session = relay.session(follow)
    session.dispatch()
    assert [b.observation.id for b in session.plan.blocks] == [block]
    assert touched(relay, block) == relay.clock.wall()
    session.abort("test")


def test_the_blocks_a_generation_was_made_on_are_touched_again_at_its_commit(
    relay: sm.Relay,
) -> None:
    u0 = sm.user("hi")
    sm.answer(relay, (u0,), "one", 1)
    block = first_record(relay)
    session = relay.session((u0, sm.said("one"), sm.user("more")))
    session.dispatch()
    relay.clock.advance(2 * TOUCH_GRANULARITY_S)  # a generation longer than the granularity
    sm.answer(relay, (), "two", 2, session=session)
    assert touched(relay, block) == relay.clock.wall()


def test_a_next_turn_within_the_granularity_rewrites_no_payload(relay: sm.Relay) -> None:
    u0 = sm.user("hi")
    sm.answer(relay, (u0,), "one", 1)
    block = first_record(relay)
    admitted_at = relay.clock.wall()
    follow = (u0, sm.said("one"), sm.user("more"))
    for later, touched_at in ((600.0, admitted_at), (TOUCH_GRANULARITY_S - 600.0, admitted_at),
                              (1.0, admitted_at + TOUCH_GRANULARITY_S + 1.0)):  # fmt: skip
        relay.clock.advance(later)
        session = relay.session(follow)
        session.dispatch()
        assert [b.observation.id for b in session.plan.blocks] == [block]
        assert touched(relay, block) == touched_at
        session.abort("test")


def test_expiry_and_cleanup_allow_for_the_lag_of_a_coarse_touch(relay: sm.Relay) -> None:
    """Used 59 minutes after its admission (within the granularity: not rewritten), a
    block is still replayed and kept the full window after that use, and only then
    expires and goes."""
    u0 = sm.user("hi")
    sm.answer(relay, (u0,), "one", 1)
    block = first_record(relay)
    admitted_at = relay.clock.wall()
    follow = (u0, sm.said("one"), sm.user("more"))
    relay.clock.advance(59 * 60.0)
    session = relay.session(follow)
    session.dispatch()
    session.abort("test")
    used_at = relay.clock.wall()
    assert touched(relay, block) == admitted_at  # lags the use by 59 minutes
    relay.clock.advance(30 * DAY)  # the whole window since the use; the barrier is open
    assert sm.replayed(relay, follow) == (["rs_1"], [])
    result = relay.cleanup.run()
    assert result is not None and result.reclaimed == 0
    relay.clock.advance(120.0)
    assert relay.clock.wall() - used_at > 30 * DAY
    assert sm.replayed(relay, follow) == ([], [Reason.RECORD_EXPIRED])
    result = relay.cleanup.run()
    assert result is not None and result.reclaimed == 1


def test_a_block_validated_while_planning_is_touched_even_when_not_selected(
    relay: sm.Relay,
) -> None:
    """B (made on A) repeats A's item ids: the chain [A, B] passes every payload check,
    then fails as a whole (duplicate_item); the plan falls back to [A]. Both were
    inspected and validated, so both are touched."""
    u0, a1, u2 = sm.user("hi"), sm.said("one"), sm.user("more")
    _, items = sm.answer(relay, (u0,), "one", 1)
    relay.clock.advance(DAY)
    duplicate = [items[0], *sm.output_items({"role": "assistant", "content": "two"}, 1,
                                            reasoning=False)]  # fmt: skip
    sm.answer(relay, (u0, a1, u2), "two", 2, items=duplicate)
    relay.clock.advance(DAY)
    session = relay.session((u0, a1, u2, sm.said("two"), sm.user("next")))
    session.dispatch()
    plan = session.plan
    assert [json.loads(b.text)[0]["id"] for b in plan.blocks] == ["rs_1"]
    assert Reason.DUPLICATE_ITEM in [r.reason for r in plan.rejections]
    assert len(plan.validated) == 2
    for key in plan.validated:
        assert touched(relay, key) == relay.clock.wall()
    session.abort("test")


# --- the watched clock ----------------------------------------------------------------------


def test_every_wall_reading_is_a_barrier_sample(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    watched = WatchedClock(clock)
    clock.advance(BARRIER_S)
    assert watched.monotonic() == clock.monotonic()
    assert watched.barrier.remaining_s == BARRIER_S  # no wall reading yet: not seen
    assert watched.wall() == clock.wall()
    assert watched.barrier.open
    clock.jump_wall(-1.0)
    with caplog.at_level(logging.INFO, logger="relay"):
        watched.wall()
    assert (watched.barrier.open, watched.barrier.cause) == (False, BarrierStart.WALL_BACKWARDS)
    assert "retention_barrier_reset cause=wall_backwards drift_s=-1.0" in caplog.text


# --- cleanup runs ----------------------------------------------------------------------------


def test_a_run_deletes_only_once_the_barrier_and_the_cutoff_allow(
    relay: sm.Relay, caplog: pytest.LogCaptureFixture
) -> None:
    u0 = sm.user("hi")
    sm.answer(relay, (u0,), "one", 1)
    relay.clock.jump_wall(31 * DAY)  # looks idle, but the clocks disagree
    cleanup = relay.cleanup
    with caplog.at_level(logging.INFO, logger="relay"):
        assert cleanup.run() is None
    assert "cache_cleanup run=1 barrier=closed" in caplog.text
    assert relay.store.stats()["payloads"] == 1
    relay.clock.advance(BARRIER_S - 1)
    assert cleanup.run() is None
    relay.clock.advance(1)
    result = cleanup.run()
    assert result is not None and result.reclaimed == 1
    assert relay.store.stats()["payloads"] == 0
    assert relay.store.stats()["observations"] == 1
    report = cleanup.to_json()
    assert report["barrier"] == {"open": True, "remainingSeconds": 0.0, "resets": 1,
                                 "cause": "drift"}  # fmt: skip
    assert (report["runs"], report["reclaimed"], report["failures"]) == (3, 1, 0)
    assert report["reclaimedBytes"] == result.reclaimed_bytes > 0


def test_a_run_that_reclaimed_checkpoints_the_wal(relay: sm.Relay) -> None:
    """The deletions sit in the WAL until a checkpoint: one after the run keeps a small
    volume's WAL bounded (design §6, disk pressure)."""
    sm.answer(relay, (sm.user("hi"),), "one", 1)
    relay.clock.advance(BARRIER_S + 31 * DAY)
    wal = Path(f"{relay.path}-wal")
    cleanup = relay.cleanup
    result = cleanup.run()
    assert result is not None and result.reclaimed == 1
    assert wal.stat().st_size == 0  # TRUNCATE: the deletion is in the database file
    sm.answer(relay, (sm.user("again"),), "two", 1)
    assert wal.stat().st_size > 0
    assert cleanup.run() is not None  # nothing idle: nothing reclaimed, no checkpoint
    assert wal.stat().st_size > 0


def test_a_store_failure_is_logged_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    store = ReasoningStore.open(tmp_path / "cache.sqlite", clock=clock)
    cleanup = RetentionCleanup(store, WatchedClock(clock), retention_s=30 * DAY)
    clock.advance(BARRIER_S)
    store.close()
    with caplog.at_level(logging.WARNING, logger="relay"):
        assert cleanup.run() is None
    assert cleanup.totals.failures == 1
    assert "cache_cleanup_failed run=1" in caplog.text


def test_runs_repeat_on_the_event_loop_until_stopped(relay: sm.Relay) -> None:
    done = asyncio.Event()
    runs: list[int] = []

    class Counted(RetentionCleanup):
        def run(self) -> None:
            runs.append(len(runs))
            if len(runs) == 3:
                self.stop()
                done.set()

    async def main() -> None:
        cleanup = Counted(relay.store, relay.watched, retention_s=30 * DAY, every_s=0.001)
        cleanup.start()
        cleanup.start()  # idempotent
        await asyncio.wait_for(done.wait(), 10)
        assert cleanup._timer is None

    asyncio.run(main())
    assert runs == [0, 1, 2]
