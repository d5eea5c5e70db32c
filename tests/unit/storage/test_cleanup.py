"""Payload reclamation (relay.storage.cleanup) on real SQLite files, stated as behaviour:
only idle payloads go, descendants before ancestors (ancestors outlive descendants), a
pinned dependency survives, a sibling in use keeps its position, the ledger (observations,
markers) stays, and the counts are exact. Ancestry is written in one helper (``admit``)."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.clock import ManualClock
from relay.core.records import EMPTY_PLAN, BlockRef, MarkerKind, PriorPlan
from relay.core.scope import ScopeTargeting
from relay.storage.cleanup import MAX_RECLAIMED_PER_RUN, CleanupResult
from relay.storage.replay_store import ReasoningStore

TARGET = ScopeTargeting(credential="c" * 64, model="gpt-5", caller=None)
DAY = 86_400.0
NOW = 1_767_225_600.0
CUTOFF = NOW - 30 * DAY
OLD = CUTOFF - 1.0  # idle past the window: eligible
FRESH = CUTOFF  # exactly at the cutoff: not idle *longer* than the window


def h(n: int) -> str:
    return f"{n:064x}"


@dataclass
class Rec:
    id: int
    ref: BlockRef
    plan: PriorPlan  # the plan of its chain: its ancestors, then itself


_serial = iter(range(1, 10**9))


def admit(
    store: ReasoningStore, scope_id: int, position: int, *, touched: float,
    parent: Rec | None = None, start: str | None = None,
) -> Rec:  # fmt: skip
    """An admitted record at ``position`` generated on top of ``parent``'s chain, with
    a payload last touched at ``touched``. The only place that writes ancestry."""
    n = next(_serial)
    prior = parent.plan if parent is not None else EMPTY_PLAN
    ref = BlockRef(h(n), h(n + 10**8))
    with store.transaction():
        row = store.add_observation(
            scope_id=scope_id, generation=1, position=position,
            start_digest=start or h(n + 2 * 10**8), end_digest=ref.end_digest,
            envelope_fingerprint=h(3), payload_fingerprint=ref.payload_fingerprint,
            output_hash=h(4), prior_plan=prior, intent_id=f"producer_{n}",
            snapshot=None, replayable=True, now=touched,
        )  # fmt: skip
        store.put_payload(row.id, f'[{{"n":{n}}}]', touched)
    return Rec(row.id, ref, row.chain_plan)


def scope(store: ReasoningStore, n: int = 1) -> int:
    return store.scope_for(h(10**9 + n), TARGET).id


def kept(store: ReasoningStore, *recs: Rec) -> list[bool]:
    found = store.load_payloads([r.id for r in recs], max_bytes=1 << 20)
    return [r.id in found for r in recs]


def pin(store: ReasoningStore, scope_id: int, intent_id: str, *recs: Rec) -> None:
    with store.transaction():
        store.create_intent(intent_id, scope_id=scope_id, position=99, start_digest=h(7), now=NOW)
        store.pin(intent_id, [r.id for r in recs])


def test_only_payloads_idle_longer_than_the_window_go(store: ReasoningStore) -> None:
    sid = scope(store)
    idle, fresh = admit(store, sid, 1, touched=OLD), admit(store, sid, 3, touched=FRESH)
    size = store.load_payloads([idle.id], max_bytes=1 << 20)[idle.id].size
    assert store.cleanup.eligible(CUTOFF) == 1
    result = store.cleanup.reclaim(CUTOFF)
    assert result == CleanupResult(reclaimed=1, reclaimed_bytes=size, examined=1)
    assert kept(store, idle, fresh) == [False, True]


def reclaimed_at(store: ReasoningStore, *recs: Rec) -> list[float | None]:
    conn = store._conn
    assert conn is not None
    marks = dict(conn.execute("SELECT id, reclaimed_at FROM observations").fetchall())
    return [marks[r.id] for r in recs]


def test_the_run_that_deletes_a_payload_marks_its_record_reclaimed(
    store: ReasoningStore, tmp_path: Path
) -> None:
    sid = scope(store)
    idle, fresh = admit(store, sid, 1, touched=OLD), admit(store, sid, 3, touched=FRESH)
    assert reclaimed_at(store, idle, fresh) == [None, None]
    store.cleanup.reclaim(CUTOFF, now=NOW + 5)
    assert reclaimed_at(store, idle, fresh) == [NOW + 5, None]  # only the one deleted
    # Without a time given, the store's clock says when.
    with ReasoningStore.open(tmp_path / "other.sqlite", clock=ManualClock(wall=NOW + 9)) as other:
        rec = admit(other, scope(other), 1, touched=OLD)
        other.cleanup.reclaim(CUTOFF)
        assert reclaimed_at(other, rec) == [NOW + 9]


def test_an_idle_chain_goes_descendants_first_and_the_ledger_stays(store: ReasoningStore) -> None:
    sid = scope(store)
    a = admit(store, sid, 1, touched=OLD)
    b = admit(store, sid, 3, touched=OLD, parent=a)
    c = admit(store, sid, 5, touched=OLD, parent=b)
    with store.transaction():
        store.add_marker(sid, MarkerKind.START_POISON, h(8), 7, NOW)
    before = store.stats()
    result = store.cleanup.reclaim(CUTOFF, limit=2)
    assert (result.reclaimed, result.capped) == (2, True)
    assert kept(store, a, b, c) == [True, False, False]  # the ancestor outlives them
    assert store.cleanup.reclaim(CUTOFF).reclaimed == 1
    assert kept(store, a, b, c) == [False, False, False]
    after = store.stats()
    assert after["payloads"] == before["payloads"] - 3
    for table in ("observations", "markers", "dependencies", "scopes"):
        assert after[table] == before[table], table
    assert store.observation(a.id) is not None


def test_a_retained_descendant_keeps_its_ancestors(store: ReasoningStore) -> None:
    sid = scope(store)
    a = admit(store, sid, 1, touched=OLD)
    b = admit(store, sid, 3, touched=OLD, parent=a)
    c = admit(store, sid, 5, touched=FRESH, parent=b)  # in use
    result = store.cleanup.reclaim(CUTOFF)
    assert (result.reclaimed, result.descendant) == (0, 2)
    assert kept(store, a, b, c) == [True, True, True]


def test_a_pinned_dependency_survives_until_its_intent_resolves(store: ReasoningStore) -> None:
    sid = scope(store)
    a = admit(store, sid, 1, touched=OLD)
    b = admit(store, sid, 3, touched=OLD, parent=a)
    other = admit(store, sid, 1, touched=OLD, start=h(5))
    pin(store, sid, "intent_live", a)
    result = store.cleanup.reclaim(CUTOFF)
    # b (a descendant of the pinned a) is not pinned itself and goes; a stays
    assert (result.reclaimed, result.pinned) == (2, 1)
    assert kept(store, a, b, other) == [True, False, False]
    with store.transaction():
        store.delete_intent("intent_live")
    assert store.cleanup.reclaim(CUTOFF).reclaimed == 1
    assert kept(store, a) == [False]


def test_the_producing_intent_pins_its_record(store: ReasoningStore) -> None:
    sid = scope(store)
    a = admit(store, sid, 1, touched=OLD)
    producer = store.observation(a.id)
    assert producer is not None and producer.intent_id is not None
    with store.transaction():
        store.create_intent(producer.intent_id, scope_id=sid, position=1, start_digest=h(6),
                            now=NOW)  # fmt: skip
    assert store.cleanup.reclaim(CUTOFF).pinned == 1
    assert kept(store, a) == [True]


def test_a_sibling_in_use_keeps_its_position(store: ReasoningStore) -> None:
    """Two answers generated at one position: while one is in use, the other stays; once
    both are idle, both go (siblings elsewhere never block)."""
    sid, other_scope = scope(store), scope(store, 2)
    start = h(77)
    old = admit(store, sid, 1, touched=OLD, start=start)
    used = admit(store, sid, 1, touched=FRESH, start=start)
    elsewhere = admit(store, other_scope, 1, touched=OLD, start=start)
    later = admit(store, sid, 3, touched=FRESH)  # another position: not a competitor
    result = store.cleanup.reclaim(CUTOFF)
    assert (result.reclaimed, result.competitor) == (1, 1)
    assert kept(store, old, used, elsewhere, later) == [True, True, False, True]
    assert store.cleanup.reclaim(NOW + 1).reclaimed == 3  # everything idle now
    assert kept(store, old, used, later) == [False, False, False]


def test_at_most_the_limit_per_run(store: ReasoningStore) -> None:
    sid = scope(store)
    recs = [
        admit(store, sid, 1 + 2 * (i % 7), touched=OLD) for i in range(MAX_RECLAIMED_PER_RUN + 30)
    ]
    first = store.cleanup.reclaim(CUTOFF)
    assert (first.reclaimed, first.capped) == (MAX_RECLAIMED_PER_RUN, True)
    second = store.cleanup.reclaim(CUTOFF)
    assert (second.reclaimed, second.capped) == (30, False)
    assert not any(kept(store, *recs))
    assert store.cleanup.reclaim(CUTOFF) == CleanupResult()


# --- the property: random forests, random pins and touches, runs of random limits ---------


@dataclass
class Forest:
    store: ReasoningStore
    recs: list[Rec] = field(default_factory=list)
    parent: dict[int, int | None] = field(default_factory=dict)
    touched: dict[int, float] = field(default_factory=dict)
    start: dict[int, str] = field(default_factory=dict)
    pinned: set[int] = field(default_factory=set)


def reference_fixpoint(forest: Forest, cutoff: float) -> set[int]:
    """What repeated runs must reclaim in the end, computed from the rules alone."""
    alive = {r.id for r in forest.recs}

    def ancestors(key: int) -> Iterator[int]:
        up = forest.parent[key]
        while up is not None:
            yield up
            up = forest.parent[up]

    def descendants(key: int) -> set[int]:
        return {r.id for r in forest.recs if key in set(ancestors(r.id))}

    while True:
        gone = {
            key for key in alive
            if forest.touched[key] < cutoff
            and key not in forest.pinned
            and not any(other != key and forest.start[other] == forest.start[key]
                        and forest.touched[other] >= cutoff for other in alive)
            and not (descendants(key) & alive)
        }  # fmt: skip
        if not gone:
            return {r.id for r in forest.recs} - alive
        alive -= gone


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    size=st.integers(1, 24),
    limits=st.lists(st.integers(1, 5), min_size=1, max_size=40),
)
def test_reclaimed_counts_are_exact_and_ancestors_outlive_descendants(
    tmp_path_factory: pytest.TempPathFactory, seed: int, size: int, limits: Sequence[int]
) -> None:
    rng = random.Random(seed)
    print(f"seed={seed}")
    path = tmp_path_factory.mktemp("forest") / "cache.sqlite"
    with ReasoningStore.open(path, clock=ManualClock()) as store:
        sid = scope(store)
        forest = Forest(store)
        by_id: dict[int, Rec] = {}
        positions: dict[int, int] = {}
        for _ in range(size):
            parent = rng.choice([None, *forest.recs]) if forest.recs else None
            position = (positions[parent.id] if parent else -1) + rng.choice([2, 2, 4])
            touched = rng.choice([OLD, OLD, OLD - 40 * DAY, FRESH, NOW])
            shared = [forest.start[r.id] for r in forest.recs
                      if positions[r.id] == position and rng.random() < 0.5]  # fmt: skip
            start = shared[0] if shared else h(rng.randrange(10**6) + 3 * 10**8)
            rec = admit(store, sid, position, touched=touched, parent=parent, start=start)
            forest.recs.append(rec)
            by_id[rec.id] = rec
            positions[rec.id] = position
            forest.parent[rec.id] = parent.id if parent else None
            forest.touched[rec.id], forest.start[rec.id] = touched, start
        pins = [r for r in forest.recs if rng.random() < 0.15]
        if pins:
            pin(store, sid, "intent_pin", *pins)
            forest.pinned = {r.id for r in pins}
        expected = reference_fixpoint(forest, CUTOFF)
        reclaimed = 0
        for limit in limits:
            result = store.cleanup.reclaim(CUTOFF, limit=limit)
            assert result.reclaimed <= limit
            reclaimed += result.reclaimed
            alive = {r.id for r, there in zip(forest.recs, kept(store, *forest.recs), strict=True)
                     if there}  # fmt: skip
            assert len(forest.recs) - len(alive) == reclaimed, "counts are exact"
            for key in alive:  # ancestors outlive descendants
                up = forest.parent[key]
                assert up is None or up in alive, (key, up)
            gone = {r.id for r in forest.recs} - alive
            assert gone <= expected, "reclaimed something the rules keep"
            assert not any(forest.touched[k] >= CUTOFF or k in forest.pinned for k in gone)
        while (result := store.cleanup.reclaim(CUTOFF)).reclaimed:
            reclaimed += result.reclaimed
        assert reclaimed == len(expected)
        assert [r.id for r in forest.recs if not kept(store, r)[0]] == sorted(expected)


def test_pinning_a_chains_last_block_keeps_the_whole_chain(store: ReasoningStore) -> None:
    """A dispatch pins only its plan's last block (design §6): every block beneath it is
    that block's ancestry, kept by the descendant rule while it is pinned."""
    sid = scope(store)
    a = admit(store, sid, 1, touched=OLD)
    b = admit(store, sid, 3, touched=OLD, parent=a)
    c = admit(store, sid, 5, touched=OLD, parent=b)
    pin(store, sid, "intent_live", c)
    result = store.cleanup.reclaim(CUTOFF)
    assert (result.reclaimed, result.pinned, result.descendant) == (0, 1, 2)
    assert kept(store, a, b, c) == [True, True, True]
    with store.transaction():
        store.delete_intent("intent_live")
    assert store.cleanup.reclaim(CUTOFF).reclaimed == 3
    assert kept(store, a, b, c) == [False, False, False]
