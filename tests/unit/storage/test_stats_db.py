"""relay.storage.stats_db: hourly tallies add up across flushes, prune by hour, survive a
reopen, and refuse a file that is not theirs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.core.token_usage import HourDelta, Key, Tally
from relay.storage.stats_db import FILE_NAME, StatsDB


def delta(hour: int, requests: int, *, cached: int = 0) -> HourDelta:
    out = HourDelta()
    out.tallies.add(
        Key(hour, "chat", "gpt-5", "replayed"), Tally(requests, requests, 1, 100, cached)
    )
    out.events[hour, "fenced", "direct_responses"] += requests
    out.latency[hour, 5] += requests
    return out


def test_flushes_add_up_and_survive_a_reopen(tmp_path: Path) -> None:
    db = StatsDB.beside(tmp_path / "reasoning-cache.sqlite")
    assert db.path == tmp_path / FILE_NAME
    db.add(delta(3600, 1, cached=10))
    db.add(delta(3600, 2, cached=20))
    db.add(delta(7200, 4))
    db.close()
    db = StatsDB(tmp_path / FILE_NAME)
    got = db.since(3600)
    tally = got.tallies.by_key[Key(3600, "chat", "gpt-5", "replayed")]
    assert (tally.requests, tally.cached_tokens, tally.blocks) == (3, 30, 2)
    assert got.events[3600, "fenced", "direct_responses"] == 3
    assert got.latency[7200, 5] == 4
    assert set(db.since(7200).tallies.by_key) == {Key(7200, "chat", "gpt-5", "replayed")}
    assert db.size_bytes() > 0
    db.close()


def test_prune_drops_earlier_hours_only(tmp_path: Path) -> None:
    db = StatsDB(tmp_path / FILE_NAME)
    for hour in (0, 3600, 7200):
        db.add(delta(hour, 1))
    assert db.prune(7200) == 6  # two hours x three tables
    kept = db.since(0)
    assert {k.hour for k in kept.tallies.by_key} == {7200}
    assert set(kept.events) == {(7200, "fenced", "direct_responses")}
    db.close()


def test_refuses_another_database(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA application_id = 12345")
    conn.close()
    with pytest.raises(sqlite3.DatabaseError, match="not a relay stats database"):
        StatsDB(path)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 50)), min_size=1, max_size=8))
def test_stored_totals_equal_the_sum_of_deltas(tmp_path_factory: pytest.TempPathFactory,
                                               flushes: list[tuple[int, int]]) -> None:  # fmt: skip
    db = StatsDB(tmp_path_factory.mktemp("stats") / FILE_NAME)
    expected = HourDelta()
    for hour, n in flushes:
        d = delta(hour * 3600, n)
        db.add(d)
        expected.merge(d)
    got = db.since(0)
    assert got.tallies.by_key == expected.tallies.by_key
    assert got.events == expected.events
    assert got.latency == expected.latency
    db.close()
