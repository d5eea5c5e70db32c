"""The replay store (relay.storage.replay_store) against real SQLite files."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.clock import ManualClock
from relay.core.records import (
    EMPTY_PLAN,
    TOUCH_GRANULARITY_S,
    BlockRef,
    MarkerKind,
    Observation,
    OversizedPayload,
    PriorPlan,
    StoredPayload,
    StoredSizeExceeded,
    plan_chain,
)
from relay.core.scope import ScopeTargeting
from relay.errors import CacheUnavailable, StoreCorrupt, StoreError, StoreFull, StoreLocked
from relay.storage.replay_store import (
    _FEW,
    IntentPhase,
    IntentRow,
    ReasoningStore,
)
from relay.storage.schema import (
    APPLICATION_ID,
    IN_CHUNK,
    RECLAIMED_BEFORE_V6,
    SCHEMA_VERSION,
    migrate_to,
)

REPO = Path(__file__).resolve().parents[3]
TARGET = ScopeTargeting(credential="c" * 64, model="gpt-5", caller=None)
MARKER = "PAYLOAD-MARKER-7f3a"  # must never appear in an error message


def h(n: int | str) -> str:
    """A distinct 64-hex digest per ``n``."""
    return f"{n:064x}" if isinstance(n, int) else n * 64


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "reasoning-cache.sqlite"


@pytest.fixture
def store(db_path: Path, clock: ManualClock) -> Iterator[ReasoningStore]:
    opened = ReasoningStore.open(db_path, clock=clock)
    yield opened
    opened.close()


def conn_of(store: ReasoningStore) -> sqlite3.Connection:
    """The store's own connection, for tampering and PRAGMA checks only."""
    conn = store._conn
    assert conn is not None
    return conn


def scope_id(store: ReasoningStore, digest: str = h("a")) -> int:
    return store.scope_for(digest, TARGET).id


def simple_intent(store: ReasoningStore, sid: int, intent_id: str = "i") -> None:
    """An intent at position 1 with an empty plan (inside a transaction)."""
    store.create_intent(intent_id, scope_id=sid, position=1, start_digest=h(0), now=1.0)


def observe(
    store: ReasoningStore,
    scope: int,
    *,
    end: str,
    start: str = h(0),
    payload: str = h("d"),
    generation: int = 1,
    position: int = 1,
    plan: PriorPlan = EMPTY_PLAN,
    intent_id: str | None = None,
    snapshot: str | None = None,
    replayable: bool = True,
    now: float = 100.0,
) -> Observation:
    with store.transaction():
        return store.add_observation(
            scope_id=scope, generation=generation, position=position, start_digest=start,
            end_digest=end, envelope_fingerprint=h("e"), payload_fingerprint=payload,
            output_hash=h("f"), prior_plan=plan, intent_id=intent_id, snapshot=snapshot,
            replayable=replayable, now=now,
        )  # fmt: skip


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- opening, ownership and files -------------------------------------------------------


def test_pragmas_are_set(store: ReasoningStore) -> None:
    conn = conn_of(store)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2
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


# --- scopes ------------------------------------------------------------------------------


def test_scope_for_creates_once(store: ReasoningStore, clock: ManualClock) -> None:
    assert store.find_scope(h("a")) is None
    created = store.scope_for(h("a"), TARGET)  # opens its own transaction
    assert (created.digest, created.generation, created.model) == (h("a"), 1, "gpt-5")
    assert created.credential == TARGET.credential
    assert created.caller is None
    clock.advance(10)
    assert store.scope_for(h("a"), TARGET) == created
    with store.transaction():
        other = store.scope_for(h("b"), ScopeTargeting("d" * 64, "gpt-5", "u" * 64))
    assert other.id != created.id
    assert other.caller == "u" * 64
    created_at = conn_of(store).execute("SELECT created_at FROM scopes ORDER BY id").fetchall()
    assert created_at == [(clock.wall() - 10,), (clock.wall(),)]


def test_scopes_targeted_for_fencing(store: ReasoningStore) -> None:
    a = store.scope_for(h(1), ScopeTargeting("c" * 64, "gpt-5", "u" * 64)).id
    b = store.scope_for(h(2), ScopeTargeting("c" * 64, "gpt-5", None)).id
    store.scope_for(h(3), ScopeTargeting("c" * 64, "gpt-4", "u" * 64))
    store.scope_for(h(4), ScopeTargeting("d" * 64, "gpt-5", "u" * 64))
    assert store.scopes_targeted(credential="c" * 64, model="gpt-5", caller="u" * 64) == [a]
    assert store.scopes_targeted(credential="c" * 64, model="gpt-5", caller=None) == [a, b]


@pytest.mark.parametrize(
    ("selected", "expected"),
    [(None, {1: 2, 2: 2, 3: 2}), ([1, 3, 3], {1: 2, 2: 1, 3: 2}), ([], {1: 1, 2: 1, 3: 1})],
)
def test_advance_generations(
    store: ReasoningStore, selected: list[int] | None, expected: dict[int, int]
) -> None:
    ids = [scope_id(store, h(n)) for n in (1, 2, 3)]
    assert ids == [1, 2, 3]
    with store.transaction():
        changed = store.advance_generations(selected)
    assert changed == sum(g - 1 for g in expected.values())
    assert {n: store.scope_for(h(n), TARGET).generation for n in ids} == expected


def test_advance_many_generations_in_chunks(store: ReasoningStore) -> None:
    with store.transaction():
        ids = [store.scope_for(h(n), TARGET).id for n in range(1, 1202)]
        assert store.advance_generations(ids) == 1201


# --- observations ------------------------------------------------------------------------


def test_observations_at_all_generations_newest_first(store: ReasoningStore) -> None:
    sid, other = scope_id(store), scope_id(store, h("b"))
    first = observe(store, sid, end=h(1), payload=h("d"), generation=1)
    second = observe(store, sid, end=h(1), payload=h("b"), generation=2)
    observe(store, sid, end=h(2))
    observe(store, other, end=h(1))
    assert store.observations_at(sid, h(1)) == [second, first]
    assert store.observations_at(sid, h(9)) == []
    assert store.observation(first.id) == first
    assert store.observation(999) is None


def test_observation_round_trips_every_field(store: ReasoningStore) -> None:
    sid = scope_id(store)
    parent = observe(store, sid, end=h(1), payload=h(2))
    plan = PriorPlan(parent.id, 2, h(9))
    obs = observe(
        store, sid, end=h(5), start=h(3), position=4, plan=plan, intent_id="intent-1",
        snapshot="gpt-5-2026-01-01", replayable=False, now=123.5,
    )  # fmt: skip
    (read,) = store.observations_at(sid, h(5))
    assert read == obs
    assert read.prior_plan == plan
    assert (read.position, read.intent_id, read.replayable) == (4, "intent-1", False)


def test_repeats_match_every_recorded_field(store: ReasoningStore) -> None:
    sid = scope_id(store)
    parent = observe(store, sid, end=h(1), payload=h(2))
    plan = parent.chain_plan
    obs = observe(store, sid, end=h(5), start=h(3), position=4, plan=plan, payload=h("p"))
    same: dict[str, Any] = {
        "generation": 1, "position": 4, "start_digest": h(3), "end_digest": h(5),
        "envelope_fingerprint": h("e"), "payload_fingerprint": h("p"), "prior_plan": plan,
    }  # fmt: skip
    assert store.repeats(sid, **same) == [obs.id]
    for field, other in [
        ("generation", 2), ("position", 5), ("start_digest", h(4)), ("end_digest", h(6)),
        ("envelope_fingerprint", h(7)), ("payload_fingerprint", h(8)),
        ("prior_plan", EMPTY_PLAN),
    ]:  # fmt: skip
        assert store.repeats(sid, **{**same, field: other}) == [], field
    assert store.repeats(scope_id(store, h("b")), **same) == []


def test_a_conflict_is_another_payload_or_another_plan_at_the_same_end(
    store: ReasoningStore,
) -> None:
    sid = scope_id(store)
    plan = observe(store, sid, end=h(1), payload=h(2)).chain_plan
    assert not store.conflicts_at(sid, h(5), h("p"), plan)  # nothing there yet
    obs = observe(store, sid, end=h(5), plan=plan, payload=h("p"))
    assert not store.conflicts_at(sid, h(5), h("p"), plan)
    assert store.conflicts_at(sid, h(5), h("q"), plan)
    assert store.conflicts_at(sid, h(5), h("p"), EMPTY_PLAN)
    assert not store.conflicts_at(sid, h(6), h("q"), EMPTY_PLAN)  # another end
    conn_of(store).execute(  # damage that keeps the length: still another plan
        "UPDATE observations SET prior_chain = replace(prior_chain, '0', 'O') WHERE id = ?",
        (obs.id,),
    )
    assert store.conflicts_at(sid, h(5), h("p"), plan)


def chain_of(store: ReasoningStore, sid: int, length: int) -> list[Observation]:
    """``length`` records, each generated with the ones before replayed."""
    made: list[Observation] = []
    for n in range(length):
        plan = made[-1].chain_plan if made else EMPTY_PLAN
        made.append(observe(store, sid, end=h(n + 1), payload=h(100 + n), position=n, plan=plan))
    return made


def test_lineage_walks_the_parent_links_nearest_first(store: ReasoningStore) -> None:
    sid = scope_id(store)
    a, b, c, d = chain_of(store, sid, 4)
    assert store.lineage(sid, d.id, 10) == [d, c, b, a]
    assert store.lineage(sid, c.id, 2) == [c, b]
    assert store.lineage(sid, a.id, 5) == [a]
    assert store.lineage(sid, 999, 5) == []
    assert store.lineage(scope_id(store, h("b")), d.id, 5) == []  # another scope's rows
    assert [o.prior_plan.chain for o in (b, c, d)] == [
        plan_chain([o.ref for o in (a, b, c)][:n]) for n in (1, 2, 3)
    ]


def test_lineage_stops_at_a_link_that_does_not_point_to_an_older_row(
    store: ReasoningStore,
) -> None:
    sid = scope_id(store)
    a, b, c = chain_of(store, sid, 3)
    conn = conn_of(store)
    conn.execute("PRAGMA foreign_keys = OFF")  # tampering, as damage on disk would
    conn.execute("UPDATE observations SET parent_id = ? WHERE id = ?", (c.id, a.id))  # a loop
    assert store.lineage(sid, c.id, 100) == [
        c,
        b,
        a._replace(prior_plan=PriorPlan(c.id, 0, a.prior_plan.chain), replayable=False),
    ]
    conn.execute("UPDATE observations SET parent_id = 999 WHERE id = ?", (b.id,))
    assert [o.id for o in store.lineage(sid, c.id, 100)] == [c.id, b.id]


def test_children_and_retained_descendants_follow_the_links_down(store: ReasoningStore) -> None:
    sid = scope_id(store)
    a, b, c = chain_of(store, sid, 3)
    sibling = observe(store, sid, end=h(50), payload=h(51), plan=a.chain_plan)
    assert store.children_of(a.id) == [b.id, sibling.id]
    assert store.children_of(c.id) == []
    assert not store.has_retained_descendant(a.id)  # none of them holds a payload
    with store.transaction():
        store.put_payload(c.id, "[1]", now=1.0)
    # c is a's grandchild through b, which holds no payload: a still has one retained.
    assert store.has_retained_descendant(a.id) and store.has_retained_descendant(b.id)
    assert not store.has_retained_descendant(c.id)
    assert not store.has_retained_descendant(sibling.id)
    assert store.stats()["dependencies"] == 0  # ancestry costs no dependency rows


def test_batched_reads_cross_the_in_list_bound(store: ReasoningStore) -> None:
    sid = scope_id(store)
    count = IN_CHUNK + 3
    made = [observe(store, sid, start=h(10_000 + i), end=h(i)) for i in range(count)]
    again = observe(store, sid, start=h(7), end=h(0), generation=2)
    ends = [h(i) for i in range(count)] + [h(99_999)]  # one no record ends at
    assert store.observations_ending_at(sid, ends) == {
        h(i): [again, o] if i == 0 else [o] for i, o in enumerate(made)
    }
    assert store.observations_ending_at(scope_id(store, h("b")), ends) == {}
    assert store.ends_with_records(sid, ends) == {h(i) for i in range(count)}
    assert store.ends_with_records(scope_id(store, h("b")), ends) == set()
    assert store.ends_with_records(sid, []) == set()
    with store.transaction():
        for i in range(count):
            store.create_intent(
                f"intent-{i}", scope_id=sid, position=1, start_digest=h(10_000 + i), now=1.0,
            )  # fmt: skip
    starts = [h(10_000 + i) for i in range(count)]
    assert store.unresolved_intents_at(sid, starts) == {
        h(10_000 + i): {f"intent-{i}"} for i in range(count)
    }
    with store.transaction():
        for i, o in enumerate(made[:-1]):  # the last one has no payload
            store.put_payload(o.id, "[" + "1," * (i % 3) + "1]", now=5.0)
    loaded = store.load_payloads([o.id for o in made], max_bytes=5)  # 3, 5, 7 bytes
    assert made[-1].id not in loaded
    for i, o in enumerate(made[:-1]):
        if i % 3 == 2:
            assert loaded[o.id] == OversizedPayload(o.id, 7, 5)
        else:
            text = ("[" + "1," * (i % 3) + "1]").encode()
            assert loaded[o.id] == StoredPayload(o.id, text, len(text), 5.0)


def test_observations_starting_at(store: ReasoningStore) -> None:
    sid = scope_id(store)
    a = observe(store, sid, start=h(7), end=h(1))
    b = observe(store, sid, start=h(7), end=h(2))
    observe(store, sid, start=h(8), end=h(3))
    assert store.observations_starting_at(sid, h(7)) == [b, a]


def test_snapshots(store: ReasoningStore) -> None:
    sid = scope_id(store)
    assert store.latest_snapshot(sid) is None
    assert store.snapshot_last_seen(sid, "snap-a") is None
    observe(store, sid, end=h(1), snapshot="snap-a", now=10.0)
    observe(store, sid, end=h(2), snapshot="snap-a", now=30.0)
    observe(store, sid, end=h(3), snapshot="snap-b", now=20.0)
    observe(store, sid, end=h(4), snapshot=None, now=40.0)  # no snapshot: latest unchanged
    assert store.latest_snapshot(sid) == "snap-b"
    assert store.snapshot_last_seen(sid, "snap-a") == 30.0
    assert store.snapshot_last_seen(sid, "snap-b") == 20.0
    assert store.snapshot_last_seen(scope_id(store, h("b")), "snap-a") is None


@pytest.mark.parametrize(
    "plan",
    [
        PriorPlan(1, 1, "A" * 64),  # uppercase hex
        PriorPlan(1, 1, "ab"),  # short
        PriorPlan(None, 1, h(1)),  # a plan with no link
        PriorPlan(1, 0, EMPTY_PLAN.chain),  # an empty plan with one
    ],
)
def test_add_observation_refuses_plans_that_would_not_read_back(
    store: ReasoningStore, plan: PriorPlan
) -> None:
    sid = scope_id(store)
    with pytest.raises(ValueError, match="plan"):
        observe(store, sid, end=h(1), plan=plan)
    assert store.stats()["observations"] == 0


def test_a_dependency_is_a_pin_of_an_open_intent_on_an_existing_record(
    store: ReasoningStore,
) -> None:
    sid = scope_id(store)
    obs = observe(store, sid, end=h(1))
    with store.transaction():
        simple_intent(store, sid)
    conn = conn_of(store)
    for holder, ancestor in [(None, obs.id), ("missing", obs.id), ("i", obs.id + 100)]:
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(
                "INSERT INTO dependencies (intent_id, ancestor_id) VALUES (?, ?)",
                (holder, ancestor),
            )
    with store.transaction():
        store.pin("i", [obs.id])
        store.pin("i", [obs.id])  # idempotent
    assert conn.execute("SELECT * FROM dependencies").fetchall() == [("i", obs.id)]


# --- malformed stored plans ----------------------------------------------------------


@pytest.mark.parametrize(
    ("parent", "count", "chain"),
    [
        (1, 0, EMPTY_PLAN.chain),  # an empty plan with a link
        (None, 0, h(7)),  # an empty plan with another digest
        (1, 1, "not a digest"),
        (1, 1, ""),  # retired by the v5 migration
        (1, -1, h(7)),
    ],
)
def test_malformed_stored_plan_never_replays(
    store: ReasoningStore, parent: int | None, count: int, chain: str
) -> None:
    sid = scope_id(store)
    ancestor = observe(store, sid, end=h(9))
    obs = observe(store, sid, end=h(1), plan=ancestor.chain_plan, replayable=True)
    conn = conn_of(store)
    conn.execute("PRAGMA ignore_check_constraints = ON")  # damage, as on disk
    conn.execute(
        "UPDATE observations SET parent_id = ?, prior_plan_count = ?, prior_chain = ? WHERE id = ?",
        (parent, count, chain, obs.id),
    )
    for read in (store.observations_at(sid, h(1))[0], store.observation(obs.id)):
        assert read is not None
        # Read as stored, so a walk through it fails its digest check too.
        assert (read.replayable, read.prior_plan) == (False, PriorPlan(parent, count, chain))
    assert store.malformed_plans_seen == 2


# --- payloads ------------------------------------------------------------------------


def test_payload_round_trip(store: ReasoningStore) -> None:
    sid = scope_id(store)
    obs = observe(store, sid, end=h(1))
    assert store.load_payload(obs.id, max_bytes=100) is None
    text = '[{"type":"reasoning","encrypted_content":"é"}]'
    with store.transaction():
        store.put_payload(obs.id, text, 50.0)
    loaded = store.load_payload(obs.id, max_bytes=100)
    assert loaded is not None
    stored = (loaded.observation_id, loaded.output_json, loaded.touched_at)
    assert stored == (obs.id, text.encode(), 50.0)  # the stored UTF-8 bytes, not decoded
    assert loaded.size == len(text.encode()) == len(text) + 1
    assert store.stats()["payload_bytes"] == loaded.size


@pytest.mark.parametrize(("max_bytes", "refused"), [(9, True), (10, False), (11, False)])
def test_load_payload_limit(store: ReasoningStore, max_bytes: int, refused: bool) -> None:
    sid = scope_id(store)
    obs = observe(store, sid, end=h(1))
    with store.transaction():
        store.put_payload(obs.id, "x" * 10, 1.0)
    if refused:
        with pytest.raises(StoredSizeExceeded, match=f"is 10 bytes, over the {max_bytes} byte"):
            store.load_payload(obs.id, max_bytes=max_bytes)
    else:
        assert store.load_payload(obs.id, max_bytes=max_bytes) is not None


def test_oversize_payload_is_refused_before_its_text_is_read(store: ReasoningStore) -> None:
    sid = scope_id(store)
    obs = observe(store, sid, end=h(1))
    with store.transaction():
        store.put_payload(obs.id, "x", 1.0)
    # One byte of text under a size column of 5000: refused on the column alone, since
    # loading the text would have measured 1 byte and let it through.
    conn_of(store).execute("UPDATE payloads SET size = 5000")
    with pytest.raises(StoredSizeExceeded, match="is 5000 bytes"):
        store.load_payload(obs.id, max_bytes=4999)
    loaded = store.load_payload(obs.id, max_bytes=5000)
    assert loaded is not None and (loaded.output_json, loaded.size) == (b"x", 1)


def test_payload_text_is_loaded_as_its_stored_bytes_even_when_damaged(
    store: ReasoningStore,
) -> None:
    """No decode: bytes that are not UTF-8 load as they are (the planner's hash check
    refuses them) instead of failing the read, and so the request."""
    sid = scope_id(store)
    obs = observe(store, sid, end=h(1))
    with store.transaction():
        store.put_payload(obs.id, "x", 1.0)
    conn_of(store).execute("UPDATE payloads SET size = 2, output_json = CAST(? AS TEXT)",
                           (b"\xffx",))  # fmt: skip
    loaded = store.load_payload(obs.id, max_bytes=100)
    assert loaded is not None and (loaded.output_json, loaded.size) == (b"\xffx", 2)


def test_understated_size_column_is_measured(store: ReasoningStore) -> None:
    sid = scope_id(store)
    obs = observe(store, sid, end=h(1))
    with store.transaction():
        store.put_payload(obs.id, "x" * 100, 1.0)
    conn_of(store).execute("UPDATE payloads SET size = 1")
    with pytest.raises(StoredSizeExceeded, match="is 100 bytes"):
        store.load_payload(obs.id, max_bytes=50)


def test_touch_is_max_of_existing_and_now(store: ReasoningStore, clock: ManualClock) -> None:
    sid = scope_id(store)
    a, b = observe(store, sid, end=h(1)), observe(store, sid, end=h(2))
    with store.transaction():
        store.put_payload(a.id, "[]", clock.wall())
        store.put_payload(b.id, "[]", clock.wall())
    start = clock.wall()

    def touched(obs: Observation) -> float:
        loaded = store.load_payload(obs.id, max_bytes=10)
        assert loaded is not None
        return loaded.touched_at

    clock.jump_wall(-3600)  # the wall clock steps backwards
    with store.transaction():
        store.touch_payloads([a.id], clock.wall())
    assert touched(a) == start
    clock.jump_wall(3600 + TOUCH_GRANULARITY_S + 1)  # past the granularity: rewritten
    with store.transaction():
        store.touch_payloads([a.id, a.id, 999], clock.wall())
    assert (touched(a), touched(b)) == (start + TOUCH_GRANULARITY_S + 1, start)


@pytest.mark.parametrize(
    ("later", "rewritten"),
    [(0.0, False), (1.0, False), (TOUCH_GRANULARITY_S, False),
     (TOUCH_GRANULARITY_S + 0.5, True), (40 * 86_400.0, True)],
)  # fmt: skip
def test_a_touch_within_the_granularity_writes_nothing(
    store: ReasoningStore, clock: ManualClock, later: float, rewritten: bool
) -> None:
    sid = scope_id(store)
    obs = observe(store, sid, end=h(1))
    with store.transaction():
        store.put_payload(obs.id, "[]", clock.wall())
    stored = clock.wall()
    clock.advance(later)
    changes = conn_of(store).total_changes
    with store.transaction():
        store.touch_payloads([obs.id], clock.wall())
    loaded = store.load_payload(obs.id, max_bytes=10)
    assert loaded is not None
    assert loaded.touched_at == (clock.wall() if rewritten else stored)
    assert conn_of(store).total_changes - changes == int(rewritten)  # no row rewritten


@given(st.lists(st.floats(min_value=-2 * 86_400.0, max_value=3 * 86_400.0), max_size=12))
def test_a_stored_touch_lags_the_latest_use_by_less_than_the_granularity(
    steps: list[float],
) -> None:
    """Whatever the clock does between uses: the stored touch never moves back, and it
    is never more than the granularity behind the latest use (expiry allows for that)."""
    with tempfile.TemporaryDirectory() as data:
        clock = ManualClock()
        with ReasoningStore.open(Path(data) / "cache.sqlite", clock=clock) as store:
            sid = scope_id(store)
            obs = observe(store, sid, end=h(1))
            with store.transaction():
                store.put_payload(obs.id, "[]", clock.wall())
            latest = previous = clock.wall()
            for step in steps:
                clock.jump_wall(step)
                latest = max(latest, clock.wall())
                with store.transaction():
                    store.touch_payloads([obs.id], clock.wall())
                loaded = store.load_payload(obs.id, max_bytes=10)
                assert loaded is not None
                assert previous <= loaded.touched_at <= latest
                assert loaded.touched_at >= latest - TOUCH_GRANULARITY_S
                previous = loaded.touched_at


def test_touch_many_payloads_in_chunks(store: ReasoningStore) -> None:
    sid = scope_id(store)
    obs = observe(store, sid, end=h(1))
    with store.transaction():
        store.put_payload(obs.id, "[]", 1.0)
        store.touch_payloads([*range(10_000, 11_200), obs.id], 2.0 + TOUCH_GRANULARITY_S)
    loaded = store.load_payload(obs.id, max_bytes=10)
    assert loaded is not None
    assert loaded.touched_at == 2.0 + TOUCH_GRANULARITY_S


# --- markers -------------------------------------------------------------------------


def test_markers_are_idempotent_and_kind_scoped(store: ReasoningStore) -> None:
    sid, other = scope_id(store), scope_id(store, h("b"))
    with store.transaction():
        assert store.add_marker(sid, MarkerKind.START_POISON, h(1), 1, 1.0)
        assert not store.add_marker(sid, MarkerKind.START_POISON, h(1), 1, 2.0)
        assert store.add_marker(sid, MarkerKind.END_CONFLICT, h(2), 1, 1.0)
        assert store.add_marker(other, MarkerKind.START_POISON, h(3), 1, 1.0)
    assert store.stats()["markers"] == 3
    assert store.poisoned_starts(sid, [h(1), h(2), h(3), h(1)]) == {h(1)}
    assert store.conflicted_ends(sid, [h(1), h(2), h(3)]) == {h(2)}
    assert store.poisoned_starts(other, [h(1), h(3)]) == {h(3)}
    assert store.poisoned_starts(sid, []) == set()


def test_marker_queries_are_batched(store: ReasoningStore) -> None:
    sid = scope_id(store)
    marked = {h(n) for n in range(0, 1300, 7)}
    with store.transaction():
        for digest in marked:
            store.add_marker(sid, MarkerKind.END_CONFLICT, digest, 3, 1.0)
    assert store.conflicted_ends(sid, (h(n) for n in range(1300))) == marked


@pytest.mark.parametrize("count", [0, 1, _FEW, _FEW + 1, 2 * _FEW])
def test_markers_and_intents_read_whole_or_matched_agree(store: ReasoningStore, count: int) -> None:
    """A scope with at most _FEW markers (open intents) is read whole, one with more is
    matched in IN lists: the answers are the same either way, and scoped."""
    sid, other = scope_id(store), scope_id(store, h("b"))
    present = [h(n) for n in range(count)]
    with store.transaction():
        for digest in present:
            store.add_marker(sid, MarkerKind.START_POISON, digest, 1, 1.0)
            store.create_intent(
                f"intent-{digest[-4:]}", scope_id=sid, position=1, start_digest=digest, now=1.0,
            )  # fmt: skip
        store.add_marker(other, MarkerKind.START_POISON, h(10_000), 1, 1.0)
        store.add_marker(sid, MarkerKind.END_CONFLICT, h(10_001), 1, 1.0)
    asked = [*present[::2], h(10_000), h(10_001), h(10_002)]
    assert store.poisoned_starts(sid, asked) == set(present[::2])
    assert store.unresolved_intents_at(sid, asked) == {
        digest: {f"intent-{digest[-4:]}"} for digest in present[::2]
    }
    assert store.unresolved_intents_at(other, asked) == {}


def test_markers_survive_generation_changes(store: ReasoningStore) -> None:
    sid = scope_id(store)
    with store.transaction():
        store.add_marker(sid, MarkerKind.START_POISON, h(1), 1, 1.0)
        store.advance_generations()
    assert store.poisoned_starts(sid, [h(1)]) == {h(1)}


# --- intents -------------------------------------------------------------------------


def test_intent_lifecycle(store: ReasoningStore) -> None:
    sid = scope_id(store)
    ancestor = observe(store, sid, end=h(1))
    plan = ancestor.chain_plan
    with store.transaction():
        store.create_intent("intent-1", scope_id=sid, position=3, start_digest=h(2), now=11.0)
        store.create_intent("intent-2", scope_id=sid, position=3, start_digest=h(2), now=10.0)
        store.pin("intent-1", [ancestor.id, ancestor.id])
    assert store.unresolved_intents_at(sid, [h(2), h(9)]) == {h(2): {"intent-1", "intent-2"}}
    assert store.unresolved_intents() == [  # oldest first
        IntentRow("intent-2", sid, IntentPhase.DISPATCH, 3, h(2), 10.0),
        IntentRow("intent-1", sid, IntentPhase.DISPATCH, 3, h(2), 11.0),
    ]
    # The plan an intent was dispatched with is held by its pins, once per block.
    pins = conn_of(store).execute("SELECT intent_id, ancestor_id FROM dependencies").fetchall()
    assert pins == [("intent-1", ancestor.id)]

    with store.transaction():
        assert store.set_intent_phase("intent-1", IntentPhase.DELIVERY)
        assert not store.set_intent_phase("missing", IntentPhase.DELIVERY)
        produced = store.add_observation(
            scope_id=sid, generation=1, position=3, start_digest=h(2), end_digest=h(3),
            envelope_fingerprint=h(4), payload_fingerprint=h(5), output_hash=h(6),
            prior_plan=plan, intent_id="intent-1", snapshot=None, replayable=True, now=12.0,
        )  # fmt: skip
    phases = {intent.id: intent.phase for intent in store.unresolved_intents()}
    assert phases == {"intent-1": IntentPhase.DELIVERY, "intent-2": IntentPhase.DISPATCH}

    with store.transaction():
        assert store.delete_intent("intent-1")
        assert not store.delete_intent("intent-1")
    assert store.stats()["dependencies"] == 0  # its pins went with it
    assert store.unresolved_intents_at(sid, [h(2)]) == {h(2): {"intent-2"}}
    kept = store.observation(produced.id)
    assert kept is not None
    assert kept.intent_id == "intent-1"  # not a foreign key: outlives the intent


def test_intent_phase_is_checked(store: ReasoningStore) -> None:
    sid = scope_id(store)
    with store.transaction():
        simple_intent(store, sid)
    with store.transaction():
        assert store.set_intent_phase("i", "delivery")  # the plain value works too
    assert store.unresolved_intents()[0].phase is IntentPhase.DELIVERY
    with pytest.raises(ValueError, match="finished"), store.transaction():
        store.set_intent_phase("i", "finished")  # type: ignore[arg-type]
    assert store.unresolved_intents()[0].phase is IntentPhase.DELIVERY


# --- meta and diagnostics ------------------------------------------------------------


def test_meta_values(store: ReasoningStore) -> None:
    assert store.meta("coverage-gap") is None
    with store.transaction():
        store.set_meta("coverage-gap", 1)
    assert store.meta("coverage-gap") == 1
    with store.transaction():
        store.set_meta("coverage-gap", None)
    assert store.meta("coverage-gap") is None
    with pytest.raises(ValueError, match="secret"), store.transaction():
        store.set_meta("secret", "x")
    assert store.meta("secret") == store.secret


def test_stats_and_integrity(store: ReasoningStore) -> None:
    assert store.stats() == {
        "scopes": 0, "observations": 0, "payloads": 0, "markers": 0, "dependencies": 0,
        "intents": 0, "payload_bytes": 0,
    }  # fmt: skip
    sid = scope_id(store)
    obs = observe(store, sid, end=h(1))
    with store.transaction():
        store.put_payload(obs.id, "[1]", 1.0)
    assert store.stats() == {
        "scopes": 1, "observations": 1, "payloads": 1, "markers": 0, "dependencies": 0,
        "intents": 0, "payload_bytes": 3,
    }  # fmt: skip
    assert store.integrity_check() == ["ok"]


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
