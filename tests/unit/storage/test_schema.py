"""relay.storage.schema: the version check that refuses what this code may not use, the
migrations applied inside the caller's transaction (all or nothing), the data steps'
backfills, the ``IN (...)`` helpers -- on real SQLite files; and v7, which drops the dead
columns and indexes, from files laid out exactly as v5 and v6 wrote them, then VACUUMs
once."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.clock import ManualClock
from relay.core.disk_policy import MIN_RESERVE_BYTES
from relay.storage import schema
from relay.storage.replay_store import ReasoningStore
from relay.storage.schema import (
    APPLICATION_ID,
    IN_CHUNK,
    RECLAIMED_BEFORE_V6,
    SCHEMA_VERSION,
    TABLES,
    VACUUM_PENDING_KEY,
    SchemaRefused,
    SchemaTooNew,
    check_version,
    in_batches,
    migrate,
    migrate_to,
    placeholders,
)
from relay.storage.verify import verify_store
from tests.support.store_builder import build_store, rewrite_at_version
from tests.support.tmpfs import size_limited_tmpfs


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    """A new SQLite file, autocommit: each test opens its own transactions, as the store does."""
    opened = sqlite3.connect(tmp_path / "cache.sqlite", isolation_level=None)
    yield opened
    opened.close()


def pragma(conn: sqlite3.Connection, name: str) -> int:
    return int(conn.execute(f"PRAGMA {name}").fetchone()[0])


def objects(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """Every table and index with its SQL: the schema as SQLite holds it."""
    rows = conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name"
    )
    return [(kind, name, sql or "") for kind, name, sql in rows]


def migrated(conn: sqlite3.Connection, version: int | None = None) -> None:
    conn.execute("BEGIN")
    if version is None:
        migrate(conn)
    else:
        migrate_to(conn, version)
    conn.execute("COMMIT")


def test_a_new_file_is_migrated_to_the_current_version_and_marked_ours(
    conn: sqlite3.Connection,
) -> None:
    conn.execute("BEGIN")
    assert migrate(conn) == 0  # the version found
    conn.execute("COMMIT")
    assert pragma(conn, "user_version") == SCHEMA_VERSION
    assert pragma(conn, "application_id") == APPLICATION_ID
    tables = {name for kind, name, _ in objects(conn) if kind == "table"}
    assert set(TABLES) <= tables
    assert check_version(conn) == SCHEMA_VERSION


def test_migrating_a_current_file_again_changes_nothing(conn: sqlite3.Connection) -> None:
    migrated(conn)
    before = objects(conn)
    conn.execute("BEGIN")
    assert migrate(conn) == SCHEMA_VERSION
    conn.execute("COMMIT")
    assert objects(conn) == before
    assert pragma(conn, "user_version") == SCHEMA_VERSION


@pytest.mark.parametrize("version", range(SCHEMA_VERSION + 1))
def test_a_file_of_every_earlier_version_reaches_the_schema_of_a_new_one(
    tmp_path: Path, conn: sqlite3.Connection, version: int
) -> None:
    migrated(conn)
    fresh = objects(conn)
    old = sqlite3.connect(tmp_path / f"v{version}.sqlite", isolation_level=None)
    try:
        migrated(old, version)
        assert check_version(old) == version
        old.execute("BEGIN")
        assert migrate(old) == version
        old.execute("COMMIT")
        assert objects(old) == fresh
        assert pragma(old, "user_version") == SCHEMA_VERSION
    finally:
        old.close()


@pytest.mark.parametrize(
    ("application_id", "user_version", "table", "refusal", "message"),
    [
        (0x1234, 0, False, SchemaRefused, "another application"),
        (0x1234, 3, True, SchemaRefused, "another application"),
        (APPLICATION_ID, SCHEMA_VERSION + 1, True, SchemaTooNew, "newer relay"),
        (0, 0, True, SchemaRefused, "no reasoning-cache schema version"),
    ],
    ids=["foreign-empty", "foreign-versioned", "too-new", "tables-without-version"],
)
def test_a_file_this_code_may_not_use_is_refused_and_left_as_it_was(
    conn: sqlite3.Connection,
    application_id: int,
    user_version: int,
    table: bool,
    refusal: type[SchemaRefused],
    message: str,
) -> None:
    if table:
        conn.execute("CREATE TABLE theirs (x)")
    conn.execute(f"PRAGMA application_id = {application_id:d}")
    conn.execute(f"PRAGMA user_version = {user_version:d}")
    before = objects(conn)
    conn.execute("BEGIN")
    with pytest.raises(SchemaRefused, match=message) as caught:
        migrate(conn)
    conn.execute("ROLLBACK")
    assert type(caught.value) is refusal
    assert objects(conn) == before
    assert pragma(conn, "user_version") == user_version
    assert pragma(conn, "application_id") == application_id


def test_too_new_names_both_versions(conn: sqlite3.Connection) -> None:
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID:d}")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5:d}")
    with pytest.raises(SchemaTooNew) as caught:
        check_version(conn)
    text = str(caught.value)
    assert f"schema version {SCHEMA_VERSION + 5}" in text
    assert f"up to {SCHEMA_VERSION}" in text
    assert "upgrade the relay" in text


@pytest.mark.parametrize("start", [0, SCHEMA_VERSION], ids=["new-file", "current-file"])
def test_a_migration_that_fails_midway_leaves_the_old_version_intact(
    conn: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch, start: int
) -> None:
    if start:
        migrated(conn)
    before = objects(conn)

    def crash(_: sqlite3.Connection) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    # One more version whose second step fails, after its first one created a table.
    monkeypatch.setattr(
        schema, "MIGRATIONS", (*schema.MIGRATIONS, ("CREATE TABLE later (x)", crash))
    )
    conn.execute("BEGIN")
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        migrate_to(conn, SCHEMA_VERSION + 1, start)
    conn.execute("ROLLBACK")
    assert objects(conn) == before
    assert pragma(conn, "user_version") == start


def insert_observation(conn: sqlite3.Connection, ident: int, *, replayable: bool) -> None:
    """A v5 observation row (parent link and chain digest, no plan text)."""
    conn.execute(
        """INSERT INTO observations (id, scope_id, generation, position, start_digest,
            end_digest, envelope_fp, payload_fp, output_hash, prior_plan_count, intent_id,
            snapshot, replayable, observed_at, parent_id, prior_chain)
        VALUES (?, 1, 1, 1, 's', ?, 'e', 'p', 'h', 0, NULL, NULL, ?, 10.0, NULL, '')""",
        (ident, f"end-{ident}", int(replayable)),
    )


def test_v6_marks_only_replayable_records_already_without_payload(
    conn: sqlite3.Connection,
) -> None:
    migrated(conn, 5)
    conn.execute("BEGIN")
    conn.execute(
        "INSERT INTO scopes (id, digest, credential, model, created_at) VALUES (1, 'd', 'c', 'm', 0)"
    )
    insert_observation(conn, 1, replayable=True)  # with its payload
    insert_observation(conn, 2, replayable=True)  # payload gone before v6
    insert_observation(conn, 3, replayable=False)  # never had one
    conn.execute(
        "INSERT INTO payloads (observation_id, output_json, size, touched_at) VALUES (1, '[]', 2, 0)"
    )
    conn.execute("COMMIT")
    conn.execute("BEGIN")
    migrate_to(conn, 6, 5)
    conn.execute("COMMIT")
    marks = dict(conn.execute("SELECT id, reclaimed_at FROM observations ORDER BY id"))
    assert marks == {1: None, 2: RECLAIMED_BEFORE_V6, 3: None}


@pytest.mark.parametrize("plan", ["", "[]", '[[1,"a"],[2,"b"]]', "ünïcode ✓ plan"])
def test_v3_backfills_each_plan_digest_from_its_text(conn: sqlite3.Connection, plan: str) -> None:
    migrated(conn, 2)
    conn.execute("BEGIN")
    conn.execute(
        "INSERT INTO scopes (id, digest, credential, model, created_at) VALUES (1, 'd', 'c', 'm', 0)"
    )
    conn.execute(
        """INSERT INTO observations (scope_id, generation, position, start_digest, end_digest,
            envelope_fp, payload_fp, output_hash, prior_plan, prior_plan_count, replayable,
            observed_at)
        VALUES (1, 1, 1, 's', 'e', 'f', 'p', 'h', ?, 0, 1, 0)""",
        (plan,),
    )
    migrate_to(conn, 3, 2)
    conn.execute("COMMIT")
    (digest,) = conn.execute("SELECT prior_plan_digest FROM observations").fetchone()
    assert digest == hashlib.sha256(plan.encode()).hexdigest()


@given(st.lists(st.integers(), max_size=3 * IN_CHUNK + 7))
def test_in_batches_keeps_every_value_in_order_in_full_chunks(values: list[int]) -> None:
    batches = list(in_batches(values))
    assert [v for batch in batches for v in batch] == values
    assert all(len(batch) == IN_CHUNK for batch in batches[:-1])
    assert all(0 < len(batch) <= IN_CHUNK for batch in batches)
    assert len(batches) == -(-len(values) // IN_CHUNK)  # ceil: no empty tail


def test_in_batches_reads_a_one_shot_iterator_once() -> None:
    values = iter(range(IN_CHUNK + 1))
    assert [len(b) for b in in_batches(values)] == [IN_CHUNK, 1]


@pytest.mark.parametrize("count", [1, 2, 7, IN_CHUNK])
def test_placeholders_bind_exactly_count_parameters(conn: sqlite3.Connection, count: int) -> None:
    marks = placeholders(count)
    assert marks.count("?") == count
    values = list(range(count))
    found = conn.execute(f"SELECT ? IN ({marks})", [count - 1, *values]).fetchone()[0]
    assert found == 1
    with pytest.raises(sqlite3.ProgrammingError):
        conn.execute(f"SELECT 1 IN ({marks})", [*values, count])


# --- v7: the dead schema dropped, VACUUM once -------------------------------------------

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
