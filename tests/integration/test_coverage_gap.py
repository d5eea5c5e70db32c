"""The coverage gap is recorded lazily (design §7), shown with real ``relay serve``
processes over one fake upstream: a cache-off run over an existing store warns in its
banner, and records the gap durably before the first request the cache would have
observed is forwarded -- not at startup. A cache-off run that forwards nothing leaves
replay intact; one killed right after the gap was written (crash point
``after_coverage_gap``), before anything was sent, retires every older record."""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import requests

from fakeupstream.fake import FakeUpstream
from tests.support.cache_stack import continuity
from tests.support.serve_process import TIMEOUT, Relay, env_for, start
from tests.support.stack import TOKEN

WARNING = r"^WARNING: reasoning cache: off, over the existing store (\S+): the first model"


def gap_recorded(store: Path) -> bool:
    """Read as the next relay will: the write-ahead log a kill left included."""
    conn = sqlite3.connect(store)
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'coverage-gap'").fetchone()
    finally:
        conn.close()
    return row is not None


def uncounted_traffic(relay: Relay) -> None:
    """What a cache-off run may serve without a gap: nothing a cache would have seen."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert requests.get(f"{relay.base}/models", headers=auth, timeout=TIMEOUT).ok
    assert requests.get(relay.base.removesuffix("/v1") + "/healthz", timeout=TIMEOUT).ok
    refused = requests.post(  # invalid: refused before anything is forwarded
        f"{relay.base}/chat/completions", json={"model": "gpt-5"}, headers=auth, timeout=TIMEOUT
    )
    assert refused.status_code == 400
    plain = requests.post(  # not a reasoning model: the cache would skip it, unrecorded
        f"{relay.base}/chat/completions",
        json={"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]},
        headers=auth,
        timeout=TIMEOUT,
    )
    assert plain.status_code == 200, plain.text


def stored_conversation(
    tmp_path: Path, fake: FakeUpstream, started: list[Relay]
) -> tuple[dict[str, str], Path, list[dict[str, Any]]]:
    """A relay with the cache on answered one turn and stopped: its environment, its
    store and the follow-up history that replays that turn's reasoning."""
    env = env_for(tmp_path, fake)
    relay = start(started, env)
    old = relay.conversation("before the cache-off run")
    relay.stop()
    return env, tmp_path / "data" / "reasoning-cache.sqlite", old


def test_a_cache_off_run_that_forwards_nothing_keeps_replay(
    tmp_path: Path,
    upstream: FakeUpstream,
    relays: list[Relay],
) -> None:
    env, store, old = stored_conversation(tmp_path, upstream, relays)
    off = start(relays, env | {"REASONING_CACHE_ENABLED": "0"})
    assert off.wait_for(WARNING).group(1) == str(store)
    uncounted_traffic(off)
    off.stop()
    assert not gap_recorded(store)

    relay = start(relays, env)
    relay.wait_for(r"cache_opened .*gap_consumed=False generations_advanced=0")
    assert continuity(relay.chat(old)) == (1, 1, 0)  # still replays
    relay.stop()


def test_a_cache_off_run_killed_right_after_the_gap_retires_every_older_record(
    tmp_path: Path,
    upstream: FakeUpstream,
    relays: list[Relay],
) -> None:
    env, store, old = stored_conversation(tmp_path, upstream, relays)
    sent = upstream.received

    off = start(
        relays, env | {"REASONING_CACHE_ENABLED": "0", "RELAY_TEST_CRASH_AT": "after_coverage_gap"}
    )
    off.wait_for(WARNING)
    with pytest.raises(requests.ConnectionError):
        off.chat(old)
    assert off.proc.wait(TIMEOUT) == -signal.SIGKILL
    off.wait_for(r"crash_point after_coverage_gap hit=1 SIGKILL")
    assert upstream.received == sent, "killed before the forward: nothing reached upstream"
    assert gap_recorded(store), "the gap was durable before the forward"

    relay = start(relays, env)
    relay.wait_for(r"cache_opened .*gap_consumed=True generations_advanced=1")
    assert continuity(relay.chat(old)) == (0, 0, 0)  # retired
    new = relay.conversation("after the gap")
    assert continuity(relay.chat(new)) == (1, 1, 0)  # records made after it replay
    relay.stop()
