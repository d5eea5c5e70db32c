"""The observations gateway (relay.storage.observations), including malformed stored plans, against a real store."""

from __future__ import annotations

from typing import Any

import pytest

from relay.core.records import (
    EMPTY_PLAN,
    Observation,
    OversizedPayload,
    PriorPlan,
    StoredPayload,
    plan_chain,
)
from relay.storage import observations
from relay.storage.observations import observation_from_row
from relay.storage.replay_store import ReasoningStore
from relay.storage.schema import (
    IN_CHUNK,
)
from tests.support.store_rows import conn_of, h, observe, scope_id

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


def test_observations_by_id_are_the_scopes_rows_found_by_primary_key(
    store: ReasoningStore,
) -> None:
    sid = scope_id(store)
    a, b, c, d = chain_of(store, sid, 4)
    assert sorted(store.observations_by_id(sid, [d.id, b.id, 999, b.id])) == [b, d]
    assert store.observations_by_id(scope_id(store, h("b")), [a.id, c.id]) == []
    assert store.observations_by_id(sid, []) == []
    # Looked up by id, not by scanning the scope's rows (design §21).
    where = "id IN (?, ?) AND +scope_id = ?"
    (plan,) = conn_of(store).execute(
        f"EXPLAIN QUERY PLAN SELECT id FROM observations WHERE {where}", (a.id, b.id, sid)
    )
    assert "INTEGER PRIMARY KEY" in plan[-1]


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


def test_generation_ends_are_every_spelling_of_the_generations_at_those_ends(
    store: ReasoningStore,
) -> None:
    sid, other = scope_id(store), scope_id(store, h("b"))
    # Generation A (intent i1, payload d): spellings ending at 1 and 2; B (i2, payload b)
    # at 3 and 4; C (no intent, payload d) at 5 and 6; D (no intent, payload b) at 7.
    for end in (1, 2):
        observe(store, sid, start=h(7), end=h(end), intent_id="i1", payload=h("d"))
    for end in (3, 4):
        observe(store, sid, start=h(7), end=h(end), intent_id="i2", payload=h("b"))
    for end in (5, 6):
        observe(store, sid, start=h(7), end=h(end), payload=h("d"))
    observe(store, sid, start=h(7), end=h(7), payload=h("b"))
    observe(store, sid, start=h(8), end=h(1), intent_id="i1", payload=h("d"))  # another start
    observe(store, sid, start=h(8), end=h(9), intent_id="i1", payload=h("d"))
    observe(store, other, start=h(7), end=h(10), intent_id="i1", payload=h("d"))  # other scope
    assert store.generation_ends(sid, h(7), [h(1)]) == {h(1), h(2)}
    assert store.generation_ends(sid, h(7), [h(4), h(2)]) == {h(1), h(2), h(3), h(4)}
    assert store.generation_ends(sid, h(7), [h(5)]) == {h(5), h(6)}  # no intent: no intent
    assert store.generation_ends(sid, h(7), [h(7)]) == {h(7)}
    assert store.generation_ends(sid, h(7), [h(9), h(10)]) == set()  # none at this start
    assert store.generation_ends(sid, h(7), []) == set()


def test_generation_ends_read_past_one_batch_of_digests(store: ReasoningStore) -> None:
    sid = scope_id(store)
    observe(store, sid, start=h(7), end=h(1), intent_id="i1")
    observe(store, sid, start=h(7), end=h(2), intent_id="i1")
    wanted = [h(100 + n) for n in range(IN_CHUNK)] + [h(2)]  # h(2) in the second batch
    assert store.generation_ends(sid, h(7), wanted) == {h(1), h(2)}


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


# --- rows remembered by content (design §21) ---------------------------------------------


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("replayable", 0),
        ("generation", 2),
        ("end_digest", h(8)),
        ("payload_fp", h("c")),
        ("output_hash", h("b")),
        ("prior_plan_count", 2),
        ("intent_id", "intent-9"),
        ("observed_at", 7.25),
    ],
)
def test_a_row_changed_on_disk_is_read_as_it_is_now(
    store: ReasoningStore, column: str, value: object
) -> None:
    sid = scope_id(store)
    parent = observe(store, sid, end=h(9))
    obs = observe(store, sid, end=h(1), plan=parent.chain_plan)
    assert store.lineage(sid, obs.id, 2) == [obs, parent]  # built, and remembered
    conn_of(store).execute(
        f"UPDATE observations SET {column} = ? WHERE id = ?",
        (value, obs.id),
    )
    (row,) = conn_of(store).execute(
        "SELECT id, scope_id, generation, position, start_digest, end_digest, envelope_fp, "
        "payload_fp, output_hash, parent_id, prior_plan_count, prior_chain, intent_id, "
        "snapshot, replayable, observed_at FROM observations WHERE id = ?",
        (obs.id,),
    )
    now = observation_from_row(row)
    assert now != obs
    assert store.lineage(sid, obs.id, 2)[0] == now
    assert store.observation(obs.id) == now


def test_remembered_rows_stay_bounded(
    store: ReasoningStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(observations, "BUILT_ROWS", 3)
    sid = scope_id(store)
    made = [observe(store, sid, end=h(n)) for n in range(1, 8)]
    for obs in made:
        assert store.observation(obs.id) == obs
    assert len(store._built) == 3
    assert [store.observation(obs.id) for obs in made] == made  # evicted rows are built again


@pytest.mark.parametrize(("index", "twin"), [(10, 1.0), (10, True), (2, 1.0), (14, 1.0)])
def test_a_remembered_row_is_not_found_by_an_equal_value_of_another_type(
    store: ReasoningStore, index: int, twin: object
) -> None:
    """1, 1.0 and True compare (and hash) equal: a damaged row holding 1.0 must be built
    from its own values, not served the Observation of a sound row holding 1."""
    sid = scope_id(store)
    parent = observe(store, sid, end=h(9))
    obs = observe(store, sid, end=h(1), plan=parent.chain_plan)
    (row,) = conn_of(store).execute(
        f"SELECT {observations.OBSERVATION_COLUMNS} FROM observations WHERE id = ?", (obs.id,)
    )
    sound = list(row)
    sound[index] = 1
    damaged = [*sound]
    damaged[index] = twin
    gateway = observations.MalformedPlans()
    first = gateway._observation(sound)
    second = gateway._observation(damaged)
    assert second == observation_from_row(damaged)
    assert second is not first
    assert len(gateway._built) == 2
