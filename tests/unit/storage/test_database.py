"""The replay store's database (relay.storage.database): opening, ownership, file modes, schema versions, transactions, and error translation, against real SQLite files."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from relay.clock import ManualClock
from relay.core.disk_policy import MIN_RESERVE_BYTES
from relay.core.records import (
    EMPTY_PLAN,
    BlockRef,
    MarkerKind,
    PriorPlan,
    plan_chain,
)
from relay.errors import CacheUnavailable, StoreCorrupt, StoreError, StoreFull, StoreLocked
from relay.storage.database import MAX_DEFERRED_CHECKPOINTS
from relay.storage.interface import IntentPhase
from relay.storage.replay_store import ReasoningStore
from relay.storage.schema import (
    APPLICATION_ID,
    RECLAIMED_BEFORE_V6,
    SCHEMA_VERSION,
    migrate_to,
)
from tests.support.store_rows import MARKER, TARGET, conn_of, h, observe, scope_id, simple_intent

REPO = Path(__file__).resolve().parents[3]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- opening, ownership and files -------------------------------------------------------


def test_pragmas_are_set(store: ReasoningStore) -> None:
    conn = conn_of(store)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    assert conn.execute("PRAGMA fullfsync").fetchone()[0] == 1  # macOS: F_FULLFSYNC
    assert conn.execute("PRAGMA checkpoint_fullfsync").fetchone()[0] == 1
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA locking_mode").fetchone()[0] == "exclusive"
    assert conn.isolation_level is None


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o277, 0o000])
def test_directory_and_files_are_owner_only(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "fresh" / "cache.sqlite"
    previous = os.umask(umask)
    try:
        store = ReasoningStore.open(path, clock=ManualClock())
    finally:
        os.umask(previous)
    try:
        assert mode(path.parent) == 0o700
        assert mode(path) == 0o600
        for suffix in ("-wal", "-shm"):
            sibling = path.with_name(path.name + suffix)
            if sibling.exists():
                assert mode(sibling) == 0o600
    finally:
        store.close()


def test_existing_loose_file_is_restricted(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    path = tmp_path / "cache.sqlite"
    path.touch()
    path.chmod(0o644)
    with ReasoningStore.open(path, clock=ManualClock()):
        assert mode(path) == 0o600
        assert mode(tmp_path) == 0o755  # an existing parent directory is left alone


def test_exists(db_path: Path) -> None:
    assert not ReasoningStore.exists(db_path)
    ReasoningStore.open(db_path, clock=ManualClock()).close()
    assert ReasoningStore.exists(db_path)


def test_secret_persists_and_differs_between_stores(tmp_path: Path) -> None:
    first, other = tmp_path / "one.sqlite", tmp_path / "two.sqlite"
    with ReasoningStore.open(first, clock=ManualClock()) as store:
        secret = store.secret
    with ReasoningStore.open(other, clock=ManualClock()) as store:
        assert store.secret != secret
    with ReasoningStore.open(first, clock=ManualClock()) as store:
        assert store.secret == secret
    assert isinstance(secret, bytes)
    assert len(secret) == 32


def test_opened_at_is_written_from_the_clock(db_path: Path, clock: ManualClock) -> None:
    with ReasoningStore.open(db_path, clock=clock) as store:
        assert store.meta("opened_at") == clock.wall()
    clock.advance(60)
    with ReasoningStore.open(db_path, clock=clock) as store:
        assert store.meta("opened_at") == clock.wall()


def assert_locked_message(message: str, path: Path) -> None:
    assert "another relay process owns" in message
    assert str(path) in message
    assert "REASONING_CACHE_PATH" in message


def test_second_open_in_process_is_locked(store: ReasoningStore, db_path: Path) -> None:
    with pytest.raises(StoreLocked) as info:
        ReasoningStore.open(db_path, clock=ManualClock())
    assert_locked_message(str(info.value), db_path)
    assert isinstance(info.value, CacheUnavailable)
    assert store.integrity_check() == ["ok"]  # the owner is unaffected


OPEN_IN_CHILD = """
import sys
from pathlib import Path
from relay.clock import SystemClock
from relay.errors import StoreLocked
from relay.storage.replay_store import ReasoningStore
try:
    ReasoningStore.open(Path(sys.argv[1]), clock=SystemClock()).close()
except StoreLocked as exc:
    print(exc)
    sys.exit(3)
print("opened")
"""


def open_in_child(path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", OPEN_IN_CHILD, str(path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_second_process_is_locked_until_close(db_path: Path) -> None:
    store = ReasoningStore.open(db_path, clock=ManualClock())
    try:
        child = open_in_child(db_path)
        assert child.returncode == 3, child.stderr
        assert_locked_message(child.stdout, db_path)
    finally:
        store.close()
    child = open_in_child(db_path)
    assert (child.returncode, child.stdout.strip()) == (0, "opened"), child.stderr


def test_reopen_after_close_keeps_data(db_path: Path, clock: ManualClock) -> None:
    store = ReasoningStore.open(db_path, clock=clock)
    sid = scope_id(store)
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        store.find_scope(h("a"))
    with ReasoningStore.open(db_path, clock=clock) as again:
        assert again.find_scope(h("a")) == again.scope_for(h("a"), TARGET)
        assert again.scope_for(h("a"), TARGET).id == sid


# --- schema versions and foreign files ----------------------------------------------------


def test_fresh_file_gets_current_schema(store: ReasoningStore) -> None:
    conn = conn_of(store)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID


def _file_at_version(db_path: Path, version: int) -> sqlite3.Connection:
    """A store file as schema ``version`` left it, with a secret and one scope (id 1)."""
    db_path.parent.mkdir(mode=0o700)
    conn = sqlite3.connect(db_path, isolation_level=None)
    migrate_to(conn, version)
    conn.execute("INSERT INTO meta (key, value) VALUES ('secret', ?)", (b"s" * 32,))
    conn.execute(
        "INSERT INTO scopes (digest, credential, model, caller, created_at) "
        "VALUES (?, 'c', 'gpt-5', NULL, 1.0)",
        (h("a"),),
    )
    return conn


def test_a_version_2_file_goes_through_every_step_to_linked_plans(db_path: Path) -> None:
    conn = _file_at_version(db_path, 2)
    refs = [BlockRef(h(200 + n), h(300)) for n in range(3)]
    for number in range(3):  # a chain: each record generated on the ones before
        text = "[" + ",".join(f'["{r.end_digest}","{r.payload_fingerprint}"]'
                              for r in refs[:number]) + "]"  # fmt: skip
        conn.execute(
            "INSERT INTO observations (scope_id, generation, position, start_digest, "
            "end_digest, envelope_fp, payload_fp, output_hash, prior_plan, prior_plan_count, "
            "replayable, observed_at) VALUES (1, 1, ?, ?, ?, ?, ?, ?, ?, ?, 1, 1.0)",
            (number, h(100 + number), h(200 + number), h("e"), h(300), h("o"), text, number),
        )  # fmt: skip
    conn.close()
    with ReasoningStore.open(db_path, clock=ManualClock()) as store:
        read = [store.observations_at(1, ref.end_digest)[0] for ref in refs]
        assert [o.prior_plan for o in read] == [
            EMPTY_PLAN, PriorPlan(1, 1, plan_chain(refs[:1])), PriorPlan(2, 2, plan_chain(refs[:2]))
        ]  # fmt: skip
        assert all(o.replayable for o in read)
        indexes = {row[0] for row in conn_of(store).execute("SELECT name FROM sqlite_master")}
        assert {"observations_by_end", "observations_by_parent"} <= indexes
        assert "observations_by_ref" not in indexes
        assert store.integrity_check() == ["ok"]


def test_a_version_3_file_keeps_its_markers_and_accepts_rejections(db_path: Path) -> None:
    conn = _file_at_version(db_path, 3)
    for kind, digest in (("start_poison", h(1)), ("end_conflict", h(2))):
        conn.execute(
            "INSERT INTO markers (scope_id, kind, digest, position, created_at) "
            "VALUES (1, ?, ?, 1, 1.0)",
            (kind, digest),
        )
    with pytest.raises(sqlite3.IntegrityError):  # version 3 knows no end_rejected
        conn.execute(
            "INSERT INTO markers (scope_id, kind, digest, position, created_at) "
            "VALUES (1, 'end_rejected', ?, 1, 1.0)",
            (h(3),),
        )
    conn.close()
    with ReasoningStore.open(db_path, clock=ManualClock()) as store:
        assert store.poisoned_starts(1, [h(1), h(2)]) == {h(1)}
        assert store.conflicted_ends(1, [h(1), h(2)]) == {h(2)}
        with store.transaction():
            assert store.add_marker(1, MarkerKind.END_REJECTED, h(3), 1, 1.0)
        assert store.rejected_ends(1, [h(2), h(3)]) == {h(3)}
        assert store.integrity_check() == ["ok"]


def test_a_version_5_file_marks_payloads_already_gone_and_keeps_every_row(db_path: Path) -> None:
    conn = _file_at_version(db_path, 5)
    for n, replayable, payload in ((1, 1, True), (2, 1, False), (3, 0, False)):
        conn.execute(
            "INSERT INTO observations (scope_id, generation, position, start_digest, "
            "end_digest, envelope_fp, payload_fp, output_hash, prior_plan_count, prior_chain, "
            "replayable, observed_at) VALUES (1, 1, ?, ?, ?, ?, ?, ?, 0, ?, ?, 1.0)",
            (n, h(100 + n), h(200 + n), h("e"), h(300), h("o"), EMPTY_PLAN.chain, replayable),
        )  # fmt: skip
        if payload:
            conn.execute(
                "INSERT INTO payloads (observation_id, output_json, size, touched_at) "
                "VALUES (?, '[]', 2, 1.0)",
                (n,),
            )
    before = conn.execute("SELECT * FROM observations ORDER BY id").fetchall()
    conn.close()
    with ReasoningStore.open(db_path, clock=ManualClock()) as store:
        rows = conn_of(store).execute("SELECT * FROM observations ORDER BY id").fetchall()
        assert [row[:-1] for row in rows] == before  # every v5 column kept as it was
        # Only the replayable record whose payload is gone gets the "before v6" mark.
        assert [row[-1] for row in rows] == [None, RECLAIMED_BEFORE_V6, None]
        assert store.stats()["payloads"] == 1 and store.integrity_check() == ["ok"]


def test_empty_existing_file_is_initialized(db_path: Path) -> None:
    db_path.parent.mkdir()
    db_path.touch()
    with ReasoningStore.open(db_path, clock=ManualClock()) as store:
        assert store.integrity_check() == ["ok"]
        assert len(store.secret) == 32


def _future_version(conn: sqlite3.Connection) -> None:
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")


def _other_application(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA application_id = 1234")


def _tables_without_version(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA user_version = 0")
    conn.execute("PRAGMA application_id = 0")


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (_future_version, "newer relay"),
        (_other_application, "another application"),
        (_tables_without_version, "no reasoning-cache schema version"),
    ],
)
def test_unusable_sqlite_files_are_refused(
    db_path: Path, tamper: Callable[[sqlite3.Connection], None], message: str
) -> None:
    ReasoningStore.open(db_path, clock=ManualClock()).close()
    with sqlite3.connect(db_path) as raw:
        tamper(raw)
    raw.close()
    with pytest.raises(StoreCorrupt, match=message) as info:
        ReasoningStore.open(db_path, clock=ManualClock())
    assert str(db_path) in str(info.value)
    assert "REASONING_CACHE_PATH" in str(info.value)
    # Refusal changed nothing and released the file.
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("SELECT count(*) FROM meta WHERE key = 'secret'").fetchone() == (1,)
    raw.close()


def test_non_sqlite_file_is_refused_untouched(db_path: Path) -> None:
    db_path.parent.mkdir()
    content = b"this is a notes file, not a database\n" * 200
    db_path.write_bytes(content)
    with pytest.raises(StoreCorrupt) as info:
        ReasoningStore.open(db_path, clock=ManualClock())
    assert "not a SQLite database" in str(info.value)
    assert str(db_path) in str(info.value)
    assert info.value.sqlite_error == "SQLITE_NOTADB"
    assert db_path.read_bytes() == content


# --- transactions ----------------------------------------------------------------------


def test_transactions_do_not_nest(store: ReasoningStore) -> None:
    with store.transaction(), pytest.raises(RuntimeError, match="nest"), store.transaction():
        pass
    with store.transaction():  # still usable
        store.add_marker(scope_id(store), MarkerKind.START_POISON, h(1), 1, 1.0)


WRITES: list[tuple[str, Callable[[ReasoningStore], object]]] = [
    ("add_observation", lambda s: s.add_observation(
        scope_id=1, generation=1, position=1, start_digest=h(0), end_digest=h(1),
        envelope_fingerprint=h(2), payload_fingerprint=h(3), output_hash=h(4), prior_plan=EMPTY_PLAN,
        intent_id=None, snapshot=None, replayable=True, now=1.0)),
    ("put_payload", lambda s: s.put_payload(1, "[]", 1.0)),
    ("add_marker", lambda s: s.add_marker(1, MarkerKind.END_CONFLICT, h(1), 1, 1.0)),
    ("touch_payloads", lambda s: s.touch_payloads([1], 1.0)),
    ("create_intent", lambda s: s.create_intent(
        "i", scope_id=1, position=1, start_digest=h(0), now=1.0)),
    ("pin", lambda s: s.pin("i", [1])),
    ("set_intent_phase", lambda s: s.set_intent_phase("i", IntentPhase.DELIVERY)),
    ("delete_intent", lambda s: s.delete_intent("i")),
    ("advance_generations", lambda s: s.advance_generations()),
    ("set_meta", lambda s: s.set_meta("coverage-gap", 1)),
]  # fmt: skip


@pytest.mark.parametrize("write", [w for _, w in WRITES], ids=[n for n, _ in WRITES])
def test_writes_need_a_transaction(
    store: ReasoningStore, write: Callable[[ReasoningStore], object]
) -> None:
    scope_id(store)
    with pytest.raises(RuntimeError, match=r"inside ReasoningStore\.transaction"):
        write(store)


def test_exception_rolls_back_every_row(store: ReasoningStore, clock: ManualClock) -> None:
    sid = scope_id(store)
    before = store.stats()
    with pytest.raises(ZeroDivisionError), store.transaction():
        obs = store.add_observation(
            scope_id=sid, generation=1, position=1, start_digest=h(0), end_digest=h(1),
            envelope_fingerprint=h(2), payload_fingerprint=h(3), output_hash=h(4),
            prior_plan=EMPTY_PLAN, intent_id="i", snapshot="snap-1", replayable=True, now=1.0,
        )  # fmt: skip
        store.put_payload(obs.id, "[]", 1.0)
        store.add_marker(sid, MarkerKind.START_POISON, h(0), 1, 1.0)
        simple_intent(store, sid)
        store.pin("i", [obs.id])
        store.advance_generations()
        _ = 1 / 0
    assert store.stats() == before
    assert store.latest_snapshot(sid) is None
    assert store.find_scope(h("a")) == store.scope_for(h("a"), TARGET)
    assert store.scope_for(h("a"), TARGET).generation == 1


def test_reads_work_inside_and_outside_transactions(store: ReasoningStore) -> None:
    sid = scope_id(store)
    obs = observe(store, sid, end=h(1))
    assert store.observations_at(sid, h(1)) == [obs]
    with store.transaction():
        assert store.observations_at(sid, h(1)) == [obs]
        assert store.stats()["observations"] == 1


# A commit a request waits for before it is forwarded leaves the WAL's checkpoint to the
# next ordinary commit (design §21), at most MAX_DEFERRED_CHECKPOINTS in a row. A
# checkpoint copies the WAL's pages into the database file: its size says whether one ran.
CHECKPOINTS: list[tuple[str, list[bool], list[bool]]] = [
    ("ordinary", [False], [True]),
    ("before_send", [True], [False]),
    ("then ordinary", [True, False], [False, True]),
    ("bounded run", [True] * (MAX_DEFERRED_CHECKPOINTS + 1),
     [False] * MAX_DEFERRED_CHECKPOINTS + [True]),
    ("run restarts", [True, False, True], [False, True, False]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("before_send", "checkpointed"), [(b, c) for _, b, c in CHECKPOINTS],
    ids=[name for name, _, _ in CHECKPOINTS],
)  # fmt: skip
def test_a_commit_before_sending_leaves_the_checkpoint_to_the_next(
    db_path: Path, before_send: list[bool], checkpointed: list[bool]
) -> None:
    # The smallest reserve bounds the WAL to a few pages: every commit below exceeds it.
    store = ReasoningStore.open(db_path, clock=ManualClock(), reserve_bytes=MIN_RESERVE_BYTES)
    bound = conn_of(store).execute("PRAGMA wal_autocheckpoint").fetchone()[0]
    try:
        for n, (early, expected) in enumerate(zip(before_send, checkpointed, strict=True)):
            size = db_path.stat().st_size
            with store.transaction(before_send=early):
                store.set_meta(f"filler-{n}", "x" * 4 * bound * 4096)  # new overflow pages
            assert (db_path.stat().st_size > size) is expected, n
            # The bound is back after each transaction, deferred or not.
            assert conn_of(store).execute("PRAGMA wal_autocheckpoint").fetchone()[0] == bound
            assert store.meta(f"filler-{n}") == "x" * 4 * bound * 4096  # committed alike
    finally:
        store.close()


def test_a_failed_commit_before_sending_restores_the_wal_bound(store: ReasoningStore) -> None:
    bound = conn_of(store).execute("PRAGMA wal_autocheckpoint").fetchone()[0]
    with pytest.raises(ZeroDivisionError), store.transaction(before_send=True):
        store.set_meta("coverage-gap", 1)
        _ = 1 / 0
    assert conn_of(store).execute("PRAGMA wal_autocheckpoint").fetchone()[0] == bound
    assert store.meta("coverage-gap") is None


# --- faults and error messages -------------------------------------------------------


def test_full_database_is_store_full_and_recoverable(store: ReasoningStore) -> None:
    sid = scope_id(store)
    kept = observe(store, sid, end=h(1))
    conn = conn_of(store)
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    before = store.stats()
    with pytest.raises(StoreFull) as info, store.transaction():
        obs = store.add_observation(
            scope_id=sid, generation=1, position=1, start_digest=h(0), end_digest=h(2),
            envelope_fingerprint=h(2), payload_fingerprint=h(3), output_hash=h(4),
            prior_plan=EMPTY_PLAN, intent_id=None, snapshot=None, replayable=True, now=1.0,
        )  # fmt: skip
        store.put_payload(obs.id, MARKER * 20_000, 1.0)
    message = str(info.value)
    assert MARKER not in message
    assert "SQLITE_FULL" in message
    assert str(store.path) in message
    assert info.value.__suppress_context__
    assert info.value.status == 503

    assert store.stats() == before  # nothing partial
    assert store.observations_at(sid, h(2)) == []
    assert store.observations_at(sid, h(1)) == [kept]
    assert store.integrity_check() == ["ok"]
    with store.transaction():  # small safety writes can still fit
        store.add_marker(sid, MarkerKind.START_POISON, h(0), 1, 2.0)

    conn.execute("PRAGMA max_page_count = 1073741823")
    with store.transaction():
        store.put_payload(kept.id, MARKER * 20_000, 3.0)
    assert store.integrity_check() == ["ok"]


def test_constraint_errors_do_not_leak_values(store: ReasoningStore) -> None:
    sid = scope_id(store)
    obs = observe(store, sid, end=h(1))
    with store.transaction():
        store.put_payload(obs.id, MARKER, 1.0)
    with pytest.raises(StoreError) as info, store.transaction():
        store.put_payload(obs.id, MARKER + "-again", 2.0)  # one payload per observation
    assert type(info.value) is StoreError
    assert MARKER not in str(info.value)
    assert info.value.sqlite_error is not None
    assert info.value.sqlite_error.startswith("SQLITE_CONSTRAINT")
    loaded = store.load_payload(obs.id, max_bytes=100)
    assert loaded is not None
    assert loaded.output_json == MARKER.encode()


def test_unreadable_text_error_does_not_leak_it(store: ReasoningStore) -> None:
    sid = scope_id(store)
    obs = observe(store, sid, end=h(1))
    # A text column that is decoded when read (payload text is not, see above).
    conn_of(store).execute("UPDATE observations SET snapshot = CAST(? || x'ff' AS TEXT)",
                           (MARKER,))  # fmt: skip
    with pytest.raises(StoreError) as info:
        store.observation(obs.id)
    rendered = repr(info.value) + str(info.value)
    assert MARKER not in rendered
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__


def test_errors_are_cache_unavailable() -> None:
    from relay.errors import StoreIOError

    for cls in (StoreError, StoreLocked, StoreCorrupt, StoreFull, StoreIOError):
        err: Any = cls("x")
        assert isinstance(err, CacheUnavailable)
        assert err.status == 503
        assert err.envelope()["error"]["code"] == "cache_unavailable"
