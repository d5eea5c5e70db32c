"""The schema's versions and migrations (relay.storage.schema): v7 drops the dead columns
and indexes, from files laid out exactly as v5 and v6 wrote them, then VACUUMs once."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from relay.clock import ManualClock
from relay.core.disk_policy import MIN_RESERVE_BYTES
from relay.storage import schema
from relay.storage.replay_store import ReasoningStore
from relay.storage.schema import (
    SCHEMA_VERSION,
    VACUUM_PENDING_KEY,
    SchemaTooNew,
    check_version,
)
from relay.storage.verify import verify_store
from tests.support.store_builder import build_store, rewrite_at_version
from tests.support.tmpfs import size_limited_tmpfs

CURRENT_INTENT_COLUMNS = ["id", "scope_id", "phase", "position", "start_digest", "created_at"]
DROPPED_INDEXES = {"dependencies_of_observation", "strict_entries_by_created"}
START = "5" * 64


def columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


def names(conn: sqlite3.Connection, kind: str) -> set[str]:
    return {
        row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = ?", (kind,))
    }


def rows(conn: sqlite3.Connection, table: str, shared: list[str]) -> list[tuple[object, ...]]:
    order = ", ".join(str(n) for n in range(1, len(shared) + 1))
    return conn.execute(f"SELECT {', '.join(shared)} FROM {table} ORDER BY {order}").fetchall()


def old_store(tmp_path: Path, version: int) -> Path:
    """A store of ``version`` with the rows a relay writes, plus an open intent pinning
    two records, written in that version's layout (as that relay's dispatch did)."""
    path = tmp_path / f"v{version}.sqlite"
    build_store(path, "tct", "tt")
    rewrite_at_version(path, version)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "INSERT INTO intents (id, scope_id, phase, position, start_digest, prior_plan_count, "
        "created_at, deadline_at, parent_id, prior_chain) "
        "VALUES ('open', 1, 'dispatch', 7, ?, 2, 5.0, 95.0, 2, ?)",
        (START, "c" * 64),
    )
    conn.executemany("INSERT INTO dependencies (intent_id, ancestor_id) VALUES ('open', ?)",
                     [(1,), (2,)])  # fmt: skip
    conn.close()
    return path


@pytest.mark.parametrize("version", [5, 6])
def test_v7_drops_the_dead_schema_and_keeps_every_live_row(tmp_path: Path, version: int) -> None:
    path = old_store(tmp_path, version)
    before = sqlite3.connect(path)
    assert names(before, "index") >= DROPPED_INDEXES
    kept = {
        table: columns(before, table)
        for table in ("scopes", "observations", "payloads", "markers", "meta", "strict_entries")
    }
    old = {table: rows(before, table, cols) for table, cols in kept.items()}
    before.close()

    with ReasoningStore.open(path, clock=ManualClock()) as store:
        conn = store._conn
        assert conn is not None
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
        assert columns(conn, "intents") == CURRENT_INTENT_COLUMNS
        assert columns(conn, "dependencies") == ["intent_id", "ancestor_id"]
        assert not DROPPED_INDEXES & names(conn, "index")
        assert {"dependencies_of_intent", "dependencies_by_ancestor"} <= names(conn, "index")
        for table, cols in kept.items():  # every row of every other table, as it was
            now = rows(conn, table, cols)
            if table == "meta":  # the open stamps itself
                now = [row for row in now if row[0] != "opened_at"]
                old[table] = [row for row in old[table] if row[0] != "opened_at"]
            assert now == old[table], table
        # The open intent and its pins survive; startup recovery then resolves them.
        (intent,) = store.unresolved_intents()
        assert (intent.id, intent.position, intent.start_digest) == ("open", 7, START)
        pins = conn.execute("SELECT intent_id, ancestor_id FROM dependencies ORDER BY 2")
        assert pins.fetchall() == [("open", 1), ("open", 2)]
        # VACUUM ran once the migration committed: no free page, nothing left to do.
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
        assert store.meta(VACUUM_PENDING_KEY) is None
        assert store.integrity_check() == ["ok"]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    report = verify_store(path)
    assert report.schema_version == 7 and not report.damaged


def test_verify_reads_a_v6_store_as_it_is(tmp_path: Path) -> None:
    path = old_store(tmp_path, 6)
    report = verify_store(path)
    assert (report.schema_version, report.damaged, report.tally.records) == (6, False, 5)
    assert report.tally.notes == {"open_intent": 1}
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 6


def test_a_vacuum_a_crash_cut_short_runs_at_the_next_open(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    build_store(path, "t")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("INSERT INTO meta (key, value) VALUES ('big', zeroblob(100000))")
    conn.execute("DELETE FROM meta WHERE key = 'big'")  # free pages, as the drops leave
    # The migration's transaction committed with its flag; the process died before VACUUM.
    conn.execute("INSERT INTO meta (key, value) VALUES (?, 1)", (VACUUM_PENDING_KEY,))
    assert conn.execute("PRAGMA freelist_count").fetchone()[0] > 0
    conn.close()
    with ReasoningStore.open(path, clock=ManualClock()) as store:
        assert store._conn is not None
        assert store._conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
        assert store.meta(VACUUM_PENDING_KEY) is None
    with ReasoningStore.open(path, clock=ManualClock()) as again:  # once: nothing pending
        assert again.meta(VACUUM_PENDING_KEY) is None


def test_a_relay_that_knows_v6_refuses_a_v7_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "cache.sqlite"
    build_store(path, "t")
    monkeypatch.setattr(schema, "SCHEMA_VERSION", 6)  # the version check of a v6 relay
    conn = sqlite3.connect(path)
    with pytest.raises(SchemaTooNew, match=r"schema version 7; this relay knows up to 6"):
        check_version(conn)
    conn.close()


@pytest.mark.parametrize("version", [6, 7])
def test_no_strict_query_plan_needs_an_index_on_created_at(version: int) -> None:
    """Why v7 could drop ``strict_entries_by_created``: the one query reading created_at
    (the strict stats: min and max among other aggregates) scans the table, with the
    index (v6) as without it."""
    conn = sqlite3.connect(":memory:")
    schema.migrate_to(conn, version)
    plan = conn.execute(
        "EXPLAIN QUERY PLAN SELECT count(*), coalesce(sum(chars), 0), "
        "coalesce(sum(expires_at <= ?), 0), min(created_at), max(created_at) "
        "FROM strict_entries",
        (0.0,),
    ).fetchall()
    assert [row[3] for row in plan] == ["SCAN strict_entries"]


def test_without_room_for_vacuum_the_store_opens_and_the_next_start_vacuums(
    tmp_path: Path,
) -> None:
    """A real full disk (tmpfs): VACUUM fails with SQLITE_FULL after the migration
    committed; the store is used as it is, the flag stays, and a start with room runs it."""
    with size_limited_tmpfs(2 << 20) as volume:
        path = volume.target / "cache.sqlite"
        with ReasoningStore.open(path, clock=ManualClock(), reserve_bytes=MIN_RESERVE_BYTES):
            pass
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("INSERT INTO meta (key, value) VALUES ('live', zeroblob(600000))")
        conn.execute("INSERT INTO meta (key, value) VALUES ('gone', zeroblob(100000))")
        conn.execute("DELETE FROM meta WHERE key = 'gone'")
        conn.execute("INSERT INTO meta (key, value) VALUES (?, 1)", (VACUUM_PENDING_KEY,))
        conn.close()
        filler = volume.target / "filler"
        free = shutil.disk_usage(volume.target).free
        filler.write_bytes(b"\0" * (free - (200 << 10)))  # room for the startup write only
        with ReasoningStore.open(
            path, clock=ManualClock(), reserve_bytes=MIN_RESERVE_BYTES
        ) as store:
            assert store.meta(VACUUM_PENDING_KEY) == 1
            assert store.integrity_check() == ["ok"]
        filler.unlink()
        with ReasoningStore.open(
            path, clock=ManualClock(), reserve_bytes=MIN_RESERVE_BYTES
        ) as store:
            assert store.meta(VACUUM_PENDING_KEY) is None
            assert store._conn is not None
            assert store._conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
