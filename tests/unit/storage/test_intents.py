"""The intents gateway and its pins (relay.storage.intents) against a real store."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relay.core.records import EMPTY_PLAN
from relay.errors import StoreError
from relay.storage import intents
from relay.storage.intents import PIN_ROWS
from relay.storage.interface import IntentPhase, IntentRow
from relay.storage.replay_store import ReasoningStore
from relay.storage.schema import IN_CHUNK
from tests.support.store_rows import conn_of, h, observe, scope_id, simple_intent

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


@pytest.mark.parametrize("rows_per_statement", [1, 3, PIN_ROWS])
@given(picks=st.lists(st.integers(0, 9), max_size=30))
@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_pins_go_in_one_statement_per_chunk_and_are_the_set_pinned(
    store: ReasoningStore,
    monkeypatch: pytest.MonkeyPatch,
    rows_per_statement: int,
    picks: list[int],
) -> None:
    """Whatever the chunk size: the pins are exactly the distinct ids (duplicates and
    repeats ignored), written in ceil(distinct / chunk) INSERTs, never one per block."""
    monkeypatch.setattr(intents, "PIN_ROWS", rows_per_statement)
    sid = scope_id(store)
    conn = conn_of(store)
    records = [r[0] for r in conn.execute("SELECT id FROM observations ORDER BY id")]
    for n in range(len(records), 10):
        records.append(observe(store, sid, end=h(n + 1), position=n).id)
    ids = [records[pick] for pick in picks]
    inserts: list[str] = []
    conn.set_trace_callback(inserts.append)
    try:
        with store.transaction():
            store.create_intent("pinning", scope_id=sid, position=20, start_digest=h(0), now=1.0)
            store.pin("pinning", ids)
    finally:
        conn.set_trace_callback(None)
    pinned = conn.execute(
        "SELECT ancestor_id FROM dependencies WHERE intent_id = 'pinning'"
    ).fetchall()
    assert sorted(row[0] for row in pinned) == sorted(set(ids))
    statements = [s for s in inserts if s.startswith("INSERT OR IGNORE INTO dependencies")]
    assert len(statements) == -(-len(set(ids)) // rows_per_statement)
    with store.transaction():
        store.delete_intent("pinning")


def test_a_long_plan_is_pinned_within_the_parameter_bound(store: ReasoningStore) -> None:
    """More blocks than one statement takes: every pin lands, no statement binds more than
    IN_CHUNK parameters (SQLite's historical limit is 999)."""
    sid = scope_id(store)
    with store.transaction():
        ids = [
            store.add_observation(
                scope_id=sid, generation=1, position=n, start_digest=h(0), end_digest=h(n + 1),
                envelope_fingerprint=h("e"), payload_fingerprint=h("d"), output_hash=h("f"),
                prior_plan=EMPTY_PLAN, intent_id=None, snapshot=None, replayable=True, now=1.0,
            ).id
            for n in range(PIN_ROWS + 2)
        ]  # fmt: skip
        simple_intent(store, sid)
        conn = conn_of(store)
        conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, IN_CHUNK)
        store.pin("i", ids)
    assert store.stats()["dependencies"] == len(ids)


def test_a_pin_of_a_missing_record_fails_whole(store: ReasoningStore) -> None:
    sid = scope_id(store)
    obs = observe(store, sid, end=h(1))
    with pytest.raises(StoreError), store.transaction():
        simple_intent(store, sid)
        store.pin("i", [obs.id, obs.id + 100])
    assert store.stats()["dependencies"] == 0
    assert store.unresolved_intents() == []
