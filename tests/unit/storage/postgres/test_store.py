"""The shared PostgreSQL store's gateways and transactions (relay.storage.postgres.store)
against a real cluster: the same answers as the SQLite store's for the same calls."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Protocol

import pytest

from relay.clock import ManualClock
from relay.core.records import (
    EMPTY_PLAN,
    TOUCH_GRANULARITY_S,
    MarkerKind,
    OversizedPayload,
    PriorPlan,
    StoredPayload,
    StoredSizeExceeded,
)
from relay.storage.interface import IntentPhase, PayloadReclaimer, ReplayStore, StrictStore
from relay.storage.postgres.store import PostgresStore
from relay.storage.recovery import COVERAGE_GAP_KEY, fence, record_gap
from tests.support.pg_cluster import PgDatabase
from tests.support.pg_store import TARGET, open_pg

MARKER = "PAYLOAD-MARKER-7f3a"  # must never appear in an error message


def h(n: int) -> str:
    return f"{n:064x}"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store(pg_database: PgDatabase, clock: ManualClock) -> Iterator[PostgresStore]:
    opened = open_pg(pg_database, clock)
    yield opened
    opened.close()


def observe(
    store: PostgresStore, scope_id: int, n: int, *, start: int = 0,
    plan: PriorPlan = EMPTY_PLAN, payload: str | None = None, intent: str | None = None,
) -> int:  # fmt: skip
    with store.transaction():
        row = store.add_observation(
            scope_id=scope_id, generation=1, position=2 * start + 1, start_digest=h(start),
            end_digest=h(1000 + n), envelope_fingerprint=h(2000 + n),
            payload_fingerprint=h(3000 + n), output_hash=h(4000 + n), prior_plan=plan,
            intent_id=intent, snapshot="gpt-5-2026", replayable=payload is not None, now=100.0,
        )  # fmt: skip
        if payload is not None:
            store.put_payload(row.id, payload, 100.0)
    return row.id


def test_the_store_satisfies_the_protocols(store: PostgresStore) -> None:
    typed: ReplayStore = store  # mypy checks the structure; the calls check they work
    strict: StrictStore = store.strict
    cleanup: PayloadReclaimer = store.cleanup
    assert typed.secret == store.secret and len(store.secret) == 32
    assert strict.get(1) is None and cleanup.eligible(0.0) == 0


@pytest.mark.parametrize(
    ("protocol", "part"),
    [(ReplayStore, None), (StrictStore, "strict"), (PayloadReclaimer, "cleanup")],
)
def test_every_protocol_member_has_the_declared_parameters(
    store: PostgresStore, protocol: type, part: str | None
) -> None:
    """What mypy checks above, at run time too: a member renamed or a parameter dropped on
    either side fails here even where no caller is type-checked."""
    implementation = store if part is None else getattr(store, part)
    checked = 0
    for klass in protocol.__mro__:
        for name, declared in vars(klass).items():
            if name.startswith("_") or klass in (object, Protocol):
                continue
            assert hasattr(implementation, name), name
            if not callable(declared) or isinstance(declared, property):
                continue
            actual = inspect.signature(getattr(implementation, name)).parameters
            for param in list(inspect.signature(declared).parameters.values())[1:]:
                assert param.name in actual, f"{name}({param.name})"
                assert actual[param.name].kind == param.kind, f"{name}({param.name})"
            checked += 1
    assert checked >= 2  # the protocol was read at all


def test_writes_need_a_transaction_and_transactions_do_not_nest(store: PostgresStore) -> None:
    with pytest.raises(RuntimeError, match=r"inside PostgresStore\.transaction"):
        store.add_marker(1, MarkerKind.START_POISON, h(1), 1, 1.0)
    with store.transaction(), pytest.raises(RuntimeError, match="do not nest"), store.transaction():
        pass


def test_a_failed_transaction_leaves_nothing(store: PostgresStore) -> None:
    scope = store.scope_for(h(1), TARGET)
    with pytest.raises(ValueError, match="boom"), store.transaction():
        store.add_marker(scope.id, MarkerKind.START_POISON, h(5), 1, 1.0)
        raise ValueError("boom")
    assert store.poisoned_starts(scope.id, [h(5)]) == set()


def test_scopes_are_created_once_and_keep_the_secret(
    store: PostgresStore, pg_database: PgDatabase
) -> None:
    first = store.scope_for(h(1), TARGET)
    assert store.scope_for(h(1), TARGET) == first and first.generation == 1
    assert store.find_scope(h(2)) is None
    with open_pg(pg_database) as other:  # a second relay: the same secret and rows
        assert other.secret == store.secret
        assert other.find_scope(h(1)) == first


def test_observations_lineage_and_lookups(store: PostgresStore) -> None:
    scope = store.scope_for(h(1), TARGET).id
    parent = observe(store, scope, 1, payload=f'[{{"x":"{MARKER}"}}]')
    parent_row = store.observation(parent)
    assert parent_row is not None
    child = observe(store, scope, 2, start=1, plan=parent_row.chain_plan, payload="[]")
    assert [o.id for o in store.lineage(scope, child, 10)] == [child, parent]
    other = store.scope_for(h(2), TARGET).id
    assert sorted(o.id for o in store.observations_by_id(scope, [child, parent, 999])) == [
        parent,
        child,
    ]
    assert store.observations_by_id(other, [child]) == []
    assert store.observations_by_id(scope, []) == []
    assert store.children_of(parent) == [child]
    assert store.ends_with_records(scope, [h(1001), h(1002), h(1009)]) == {h(1001), h(1002)}
    assert list(store.observations_ending_at(scope, [h(1002)])) == [h(1002)]
    observe(store, scope, 3, intent="i1")  # a generation; another spelling of it below
    observe(store, scope, 4, intent="i1")
    with store.transaction():  # its payload fingerprint made the same as the sibling's
        store.add_observation(
            scope_id=scope, generation=1, position=1, start_digest=h(0),
            end_digest=h(1005), envelope_fingerprint=h(2005), payload_fingerprint=h(3003),
            output_hash=h(4005), prior_plan=EMPTY_PLAN, intent_id="i1", snapshot="gpt-5-2026",
            replayable=False, now=100.0,
        )  # fmt: skip
    assert store.generation_ends(scope, h(0), [h(1003)]) == {h(1003), h(1005)}
    assert store.generation_ends(scope, h(0), [h(1001)]) == {h(1001)}  # no intent
    assert store.generation_ends(scope, h(0), [h(1002), h(1009)]) == set()  # other start
    assert store.repeats(
        scope, generation=1, position=1, start_digest=h(0), end_digest=h(1001),
        envelope_fingerprint=h(2001), payload_fingerprint=h(3001), prior_plan=EMPTY_PLAN,
    ) == [parent]  # fmt: skip
    assert not store.conflicts_at(scope, h(1001), h(3001), EMPTY_PLAN)
    assert store.conflicts_at(scope, h(1001), h(3999), EMPTY_PLAN)
    assert store.latest_snapshot(scope) == "gpt-5-2026"
    assert store.snapshot_last_seen(scope, "gpt-5-2026") == 100.0
    assert store.has_retained_descendant(parent)
    with pytest.raises(ValueError, match="prior plan"):
        observe(store, scope, 3, plan=PriorPlan(None, 2, h(7)))


def test_payloads_are_the_stored_bytes_size_capped_and_touched_forward(
    store: PostgresStore,
) -> None:
    scope = store.scope_for(h(1), TARGET).id
    text = '[{"t":"é"}]'
    small = observe(store, scope, 1, payload=text)
    big = observe(store, scope, 2, payload="x" * 100)
    loaded = store.load_payloads([small, big, 999], max_bytes=50)
    assert loaded[small] == StoredPayload(small, text.encode(), len(text.encode()), 100.0)
    assert loaded[big] == OversizedPayload(big, 100, 50)
    with pytest.raises(StoredSizeExceeded):
        store.load_payload(big, max_bytes=50)
    for now, expected in [(100.0 + TOUCH_GRANULARITY_S / 2, 100.0), (50.0, 100.0),
                          (100.0 + 2 * TOUCH_GRANULARITY_S, 100.0 + 2 * TOUCH_GRANULARITY_S)]:  # fmt: skip
        with store.transaction():
            store.touch_payloads([small], now)
        payload = store.load_payload(small, max_bytes=50)
        assert payload is not None and payload.touched_at == expected, now


@pytest.mark.parametrize("kind", list(MarkerKind))
def test_markers_are_idempotent_and_per_kind(store: PostgresStore, kind: MarkerKind) -> None:
    scope = store.scope_for(h(1), TARGET).id
    with store.transaction():
        assert store.add_marker(scope, kind, h(5), 3, 1.0)
        assert not store.add_marker(scope, kind, h(5), 3, 2.0)
    read = {
        MarkerKind.START_POISON: store.poisoned_starts,
        MarkerKind.END_CONFLICT: store.conflicted_ends,
        MarkerKind.END_REJECTED: store.rejected_ends,
    }
    for other, marked in read.items():
        assert marked(scope, [h(5), h(6)]) == ({h(5)} if other is kind else set())


def test_intents_pins_phases_and_resolution(store: PostgresStore) -> None:
    scope = store.scope_for(h(1), TARGET).id
    block = observe(store, scope, 1, payload="[]")
    with store.transaction():
        store.create_intent("intent_1", scope_id=scope, position=3, start_digest=h(9), now=5.0)
        store.pin("intent_1", [block, block])
    assert store.unresolved_intents_at(scope, [h(9), h(8)]) == {h(9): {"intent_1"}}
    assert store.stats()["dependencies"] == 1
    with store.transaction():
        assert store.set_intent_phase("intent_1", "delivery")
        assert not store.set_intent_phase("intent_9", IntentPhase.DELIVERY)
    assert [(i.id, i.phase) for i in store.unresolved_intents()] == [
        ("intent_1", IntentPhase.DELIVERY)
    ]
    with store.transaction():
        assert store.delete_intent("intent_1")
        assert not store.delete_intent("intent_1")
    assert store.stats()["dependencies"] == 0  # the pins went with it


def test_fencing_poisons_open_intents_and_advances_generations(store: PostgresStore) -> None:
    scope = store.scope_for(h(1), TARGET).id
    other = store.scope_for(h(2), replace(TARGET, model="o3")).id
    with store.transaction():
        store.create_intent("intent_1", scope_id=scope, position=3, start_digest=h(9), now=5.0)
    assert fence(store, TARGET, 6.0) == 1
    assert store.poisoned_starts(scope, [h(9)]) == {h(9)}
    generations = {row: store.find_scope(d) for row, d in ((scope, h(1)), (other, h(2)))}
    assert {k: v.generation for k, v in generations.items() if v} == {scope: 2, other: 1}


def test_a_coverage_gap_is_consumed_as_it_is_recorded(store: PostgresStore) -> None:
    """Other relays serve on: the gap advances every generation now, and none is kept for
    a next start to consume again."""
    store.scope_for(h(1), TARGET)
    record_gap(store)
    record_gap(store)
    found = store.find_scope(h(1))
    assert found is not None and found.generation == 3
    assert store.meta(COVERAGE_GAP_KEY) is None
    with store.transaction():
        store.set_meta("note", 7)
    assert store.meta("note") == "7"
    with pytest.raises(ValueError, match="secret"), store.transaction():
        store.set_meta("secret", "x")


def test_two_relays_dispatching_in_one_scope_run_one_after_the_other(
    pg_database: PgDatabase,
) -> None:
    """The first transaction to touch a scope holds it: the second one's read of the open
    intents waits for the first's commit and then sees its intent (the rule behind
    competing_intent), never a state from before it."""
    with open_pg(pg_database) as a, open_pg(pg_database) as b:
        scope = a.scope_for(h(1), TARGET).id
        inside = threading.Event()
        seen: list[dict[str, set[str]]] = []

        def second() -> None:
            inside.wait(10)
            with b.transaction():
                b.scope_for(h(1), TARGET)  # blocks on a's row lock
                seen.append(b.unresolved_intents_at(scope, [h(9)]))

        thread = threading.Thread(target=second)
        thread.start()
        with a.transaction():
            a.scope_for(h(1), TARGET)
            a.create_intent("intent_a", scope_id=scope, position=3, start_digest=h(9), now=1.0)
            inside.set()
            thread.join(0.5)  # b is blocked behind the lock, not finished
            assert thread.is_alive() and not seen
        thread.join(10)
        assert seen == [{h(9): {"intent_a"}}]


def test_strict_records_live_in_the_shared_store(store: PostgresStore) -> None:
    entry = store.strict.put(
        scope_digest=h(1), end_digest=h(2), tool_call_ids=["call_1", "call_2"],
        provider="deepseek", model="r1", reasoning="thinking", now=10.0, expires_at=20.0,
    )  # fmt: skip
    assert entry.intact and store.strict.by_end(h(1), h(2)) == entry
    assert store.strict.by_tool_call(h(1), "call_2") == entry
    store.strict.touch([entry.id], now=15.0, expires_at=30.0)
    store.strict.touch([entry.id], now=12.0, expires_at=25.0)  # never moves back
    touched = store.strict.get(entry.id)
    assert touched is not None and (touched.touched_at, touched.expires_at) == (15.0, 30.0)
    replacing = store.strict.put(
        scope_digest=h(1), end_digest=None, tool_call_ids=["call_1", "call_2"],
        provider="deepseek", model="r1", reasoning="again", now=11.0, expires_at=40.0,
    )  # fmt: skip
    assert store.strict.by_tool_call(h(1), "call_1") == replacing
    stats = store.strict.stats(35.0)
    assert (stats.entries, stats.expired, stats.by_provider["deepseek"].entries) == (2, 1, 2)
    page = store.strict.page(limit=1)
    assert page.entries == (replacing,) and page.next_before_id == replacing.id
    assert store.strict.delete_expired(35.0) == 1
    assert store.strict.delete_tool_call("call_1") == 1 and store.strict.delete_all() == 0
