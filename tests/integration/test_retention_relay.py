"""Retention over a real loopback relay (cache on) with an injected manual clock: the
cleanup the server schedules, its counts in ``/api/cache/reasoning``, and a store whose
payloads went on serving (observations kept, no replay of what was reclaimed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from relay.cache.retention import RetentionCleanup
from relay.clock import ManualClock
from relay.core.deletion_barrier import BARRIER_S
from relay.errors import ConfigError
from relay.settings.config import load_config
from relay.storage.cleanup import CleanupResult
from tests.support.stack import Stack, running_stack

ADMIN = "admin-token-0123456789"
DAY = 86_400.0
ENV = {
    "REASONING_CACHE_ENABLED": "1",
    "RELAY_ADMIN_TOKEN": ADMIN,
    "REASONING_CACHE_CLEANUP_INTERVAL_MS": "100",
}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def stack(tmp_path: Path, clock: ManualClock) -> Iterator[Stack]:
    with running_stack(tmp_path / "data", ENV, clock=clock) as s:
        yield s


def records(stack: Stack) -> dict[str, Any]:
    resp = requests.get(
        f"http://127.0.0.1:{stack.relay.port}/api/cache/reasoning",
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=10,
    )
    assert resp.status_code == 200
    found: dict[str, Any] = resp.json()["encryptedRecords"]
    return found


def ask(stack: Stack, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    with stack.openai() as client:
        completion = client.chat.completions.create(model="gpt-5", messages=messages)
    return [*messages, {"role": "assistant", "content": completion.choices[0].message.content}]


def cleanup(stack: Stack) -> RetentionCleanup:
    assert stack.relay.runtime is not None and stack.relay.runtime.retention is not None
    return stack.relay.runtime.retention


def run_now(stack: Stack) -> CleanupResult | None:
    """One cleanup run on the relay's own event loop (the thread owning the store). The
    scheduled runs go on meanwhile, so what was reclaimed is read from the totals."""

    async def run() -> CleanupResult | None:
        return cleanup(stack).run()

    return stack.loop.run(run())


def test_the_server_schedules_cleanup_and_reports_it(stack: Stack, clock: ManualClock) -> None:
    assert cleanup(stack).every_s == 0.1
    history = ask(stack, [{"role": "user", "content": "one"}])
    history = ask(stack, [*history, {"role": "user", "content": "two"}])
    before = records(stack)
    assert (before["payloads"], before["observations"]) == (2, 2)
    retention = before["retention"]
    assert retention["retentionDays"] == 30 and retention["reclaimed"] == 0
    assert retention["barrier"]["open"] is False
    assert 0 < retention["barrier"]["remainingSeconds"] <= BARRIER_S

    clock.advance(31 * DAY)
    assert run_now(stack) is not None
    assert cleanup(stack).totals.reclaimed == 2
    after = records(stack)
    assert (after["payloads"], after["observations"]) == (0, 2)
    report = after["retention"]
    assert report["barrier"] == {"open": True, "remainingSeconds": 0.0, "resets": 0,
                                 "cause": "startup"}  # fmt: skip
    assert report["reclaimed"] == 2 and report["reclaimedBytes"] > 0
    assert report["lastRun"]["barrierOpen"] is True and report["lastRun"]["eligibleLeft"] == 0
    assert all(r["payloadBytes"] is None for r in after["recent"])

    # The conversation goes on: nothing left to replay, the answer is captured afresh.
    history = ask(stack, [*history, {"role": "user", "content": "three"}])
    assert records(stack)["payloads"] == 1


def test_a_restart_begins_the_barrier_again(stack: Stack, clock: ManualClock) -> None:
    ask(stack, [{"role": "user", "content": "one"}])
    clock.advance(20 * DAY)
    stack.restart_relay()
    clock.advance(20 * DAY)
    assert run_now(stack) is None  # 40 days idle, but the barrier is 20 days old
    assert records(stack)["payloads"] == 1
    assert cleanup(stack).totals.reclaimed == 0
    clock.advance(10 * DAY)
    assert run_now(stack) is not None
    assert cleanup(stack).totals.reclaimed == 1


@pytest.mark.parametrize("value", ["99", "0", "soon"])
def test_the_cleanup_interval_is_validated(value: str) -> None:
    with pytest.raises(ConfigError, match="REASONING_CACHE_CLEANUP_INTERVAL_MS"):
        load_config({"REASONING_CACHE_CLEANUP_INTERVAL_MS": value})
