"""Schema v5 (relay.storage.ancestry_migration): v4 files, written with v4's own SQL, open
with their records linked, and the planner decides on them as it does on records the
relay writes today; what cannot be linked exactly is retired or blocks, never guessed."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from relay.clock import ManualClock
from relay.core.history_digest import HistoryDigests, history_digests
from relay.core.planner import Plan, plan_replay
from relay.core.receipts import Reason
from relay.core.records import (
    EMPTY_PLAN,
    RETIRED_CHAIN,
    BlockRef,
    Observation,
    PriorPlan,
    plan_chain,
)
from relay.storage.ancestry_migration import legacy_plan_refs
from relay.storage.recovery import open_enabled
from relay.storage.replay_store import ReasoningStore
from relay.storage.schema import APPLICATION_ID, migrate_to
from relay.storage.scoped_source import ScopedSource
from tests.support.canonical_reference import identity_scope

NOW = 1_800_000_000.0
SCOPE = identity_scope()


def call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "read", "arguments": "{}"}}


MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "hello"},
    {"role": "assistant", "content": "one"},
    {"role": "user", "content": "read it"},
    {"role": "assistant", "content": None, "tool_calls": [call("call_1")]},
    {"role": "tool", "tool_call_id": "call_1", "content": "data"},
    {"role": "assistant", "content": "three"},
    {"role": "user", "content": "next"},
]
HISTORY: HistoryDigests = history_digests(SCOPE, MESSAGES)
KEYS = {block.position: block for block in HISTORY.assistant_blocks}


def output(position: int) -> str:
    items: list[dict[str, Any]] = [
        {"type": "reasoning", "id": f"rs_{position}", "summary": [],
         "encrypted_content": f"enc-{position}"},
    ]  # fmt: skip
    calls = MESSAGES[position].get("tool_calls") or []
    for index, tool_call in enumerate(calls):
        items.append({"type": "function_call", "id": f"fc_{position}_{index}",
                      "call_id": tool_call["id"], "name": "read", "arguments": "{}",
                      "status": "completed"})  # fmt: skip
    if MESSAGES[position]["content"]:
        items.append({"type": "message", "id": f"msg_{position}", "status": "completed",
                      "role": "assistant", "content": [{"type": "output_text", "annotations": [],
                      "text": MESSAGES[position]["content"]}]})  # fmt: skip
    return json.dumps(items, separators=(",", ":"))


@dataclass(frozen=True)
class Spec:
    """One record: where it ends, the earlier records (indices) replayed beneath it."""

    position: int
    plan: tuple[int, ...] = ()
    replayable: bool = True
    generation: int = 1

    @property
    def ref(self) -> BlockRef:
        fingerprint = hashlib.sha256(b"p" + output(self.position).encode()).hexdigest()
        return BlockRef(KEYS[self.position].end_digest, fingerprint)


def v4_plan_text(refs: Sequence[BlockRef]) -> str:
    """A plan as v4 spelt it (relay.core.records.PlanText.of before v5)."""
    return "[" + ",".join(f'["{r.end_digest}","{r.payload_fingerprint}"]' for r in refs) + "]"


def write_v4(path: Path, specs: Sequence[Spec], texts: dict[int, str] | None = None) -> None:
    """A v4 store holding ``specs``, written with the SQL v4's store ran: the plan as text
    with its count and digest, and a dependencies row per ancestor of an admitted record.
    ``texts`` overrides a record's stored plan text (damage)."""
    path.parent.mkdir(mode=0o700, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    migrate_to(conn, 4)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 4
    conn.execute("INSERT INTO meta (key, value) VALUES ('secret', ?)", (b"s" * 32,))
    conn.execute(
        "INSERT INTO scopes (digest, generation, credential, model, caller, created_at) "
        "VALUES (?, ?, ?, ?, ?, 1.0)",
        (SCOPE.digest, max(s.generation for s in specs), SCOPE.targeting.credential,
         SCOPE.targeting.model, SCOPE.targeting.caller),
    )  # fmt: skip
    for number, spec in enumerate(specs, start=1):
        key = KEYS[spec.position]
        text = v4_plan_text([specs[i].ref for i in spec.plan])
        text = (texts or {}).get(number, text)
        payload = output(spec.position)
        conn.execute(
            "INSERT INTO observations (scope_id, generation, position, start_digest, "
            "end_digest, envelope_fp, payload_fp, output_hash, prior_plan, "
            "prior_plan_count, prior_plan_digest, intent_id, snapshot, replayable, "
            "observed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (1, spec.generation, spec.position, key.start_digest, key.end_digest,
             key.envelope_fingerprint, spec.ref.payload_fingerprint,
             hashlib.sha256(payload.encode()).hexdigest(), text, len(spec.plan),
             hashlib.sha256(text.encode()).hexdigest(), f"intent-{number}", None,
             int(spec.replayable), NOW - 10),
        )  # fmt: skip
        if spec.replayable:
            conn.execute(
                "INSERT INTO payloads (observation_id, output_json, size, touched_at) "
                "VALUES (?, ?, ?, ?)",
                (number, payload, len(payload), NOW - 10),
            )
            conn.executemany(
                "INSERT INTO dependencies (observation_id, ancestor_id) VALUES (?, ?)",
                [(number, i + 1) for i in spec.plan],
            )
    conn.close()


def write_v5(store: ReasoningStore, specs: Sequence[Spec]) -> None:
    """The same records as the relay writes them today (each plan a link)."""
    with store.transaction():
        row = store.scope_for(SCOPE.digest, SCOPE.targeting)
        for _ in range(max(s.generation for s in specs) - 1):
            store.advance_generations([row.id])
        made: list[Observation] = []
        for number, spec in enumerate(specs, start=1):
            key = KEYS[spec.position]
            payload = output(spec.position)
            if spec.plan:
                assert made[spec.plan[-1]].chain_plan.chain == plan_chain(
                    [specs[i].ref for i in spec.plan]
                ), "a plan the relay could have dispatched"
            observation = store.add_observation(
                scope_id=row.id, generation=spec.generation, position=spec.position,
                start_digest=key.start_digest, end_digest=key.end_digest,
                envelope_fingerprint=key.envelope_fingerprint,
                payload_fingerprint=spec.ref.payload_fingerprint,
                output_hash=hashlib.sha256(payload.encode()).hexdigest(),
                prior_plan=made[spec.plan[-1]].chain_plan if spec.plan else EMPTY_PLAN,
                intent_id=f"intent-{number}", snapshot=None, replayable=spec.replayable,
                now=NOW - 10,
            )  # fmt: skip
            if spec.replayable:
                store.put_payload(observation.id, payload, NOW - 10)
            made.append(observation)


def plan_on(store: ReasoningStore) -> Plan:
    scope = store.find_scope(SCOPE.digest)
    assert scope is not None
    return plan_replay(
        HISTORY, MESSAGES, ScopedSource(store, scope.id), generation=scope.generation, now=NOW
    )


def decision(plan: Plan) -> tuple[list[int], list[tuple[Reason, int | None]], int]:
    return (
        [block.observation.position for block in plan.blocks],
        [(r.reason, r.observation_id) for r in plan.rejections],
        plan.unmatched,
    )


def observations(store: ReasoningStore) -> list[Observation]:
    found = [store.observation(n) for n in range(1, store.stats()["observations"] + 1)]
    assert None not in found
    return [o for o in found if o is not None]


SCENARIOS: dict[str, tuple[list[Spec], list[int]]] = {
    "chain": ([Spec(1), Spec(3, (0,)), Spec(5, (0, 1))], [1, 3, 5]),
    "newest-not-admitted": ([Spec(1), Spec(3, (0,)), Spec(5, (0, 1), replayable=False)], [1, 3]),
    "descendant-without-the-block": ([Spec(1), Spec(3, (), replayable=False)], []),
    "middle-sent-as-text": ([Spec(1), Spec(3, (0,)), Spec(5, (0,), replayable=False)], [1]),
    "generated-alone": ([Spec(1), Spec(3)], [3]),
    "middle-not-admitted-walked-through": (
        [Spec(1), Spec(3, (0,), replayable=False), Spec(5, (0, 1))],
        [1],
    ),
    "re-observed-in-a-new-generation": (
        [Spec(1), Spec(1, (), generation=2), Spec(3, (1,), generation=2)],
        [1, 3],
    ),
    "stale-generation": ([Spec(1), Spec(3, (0,)), Spec(5, (), generation=2)], [5]),
}


@pytest.mark.parametrize(
    ("specs", "replayed"), [pytest.param(*case, id=name) for name, case in SCENARIOS.items()]
)
def test_a_migrated_v4_store_plans_as_the_relay_plans_on_records_it_writes(
    tmp_path: Path, specs: list[Spec], replayed: list[int]
) -> None:
    write_v4(tmp_path / "old" / "cache.sqlite", specs)
    with (
        ReasoningStore.open(tmp_path / "old" / "cache.sqlite", clock=ManualClock()) as migrated,
        ReasoningStore.open(tmp_path / "new" / "cache.sqlite", clock=ManualClock()) as written,
    ):
        write_v5(written, specs)
        assert observations(migrated) == observations(written)  # every link and digest
        assert decision(plan_on(migrated)) == decision(plan_on(written))
        assert decision(plan_on(migrated))[0] == replayed
        assert migrated.stats()["dependencies"] == 0  # the links replace them
        assert migrated.malformed_plans_seen == 0
        assert migrated.integrity_check() == ["ok"]


def test_a_damaged_v4_plan_is_retired_and_blocks_the_chain_beneath_it(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    specs = [Spec(1), Spec(3, (0,)), Spec(5, (0, 1))]
    text = v4_plan_text([specs[0].ref, specs[1].ref])
    write_v4(path, specs, texts={3: text.upper()})  # same length, not the one spelling
    with ReasoningStore.open(path, clock=ManualClock()) as store:
        a5 = store.observation(3)
        assert a5 is not None
        assert (a5.replayable, a5.prior_plan) == (False, PriorPlan(None, 2, RETIRED_CHAIN))
        plan = plan_on(store)
        # As v4 decided: the newest record's plan is unknown, so is what lies beneath it.
        assert decision(plan)[0] == []
        assert [r.reason for r in plan.rejections][:2] == [
            Reason.NOT_REPLAYABLE, Reason.DESCENDANT_WITHOUT_BLOCK,
        ]  # fmt: skip


def test_a_plan_whose_last_block_is_not_stored_keeps_its_digest_and_misses_its_ancestor(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cache.sqlite"
    specs = [Spec(1), Spec(3, (0,)), Spec(5, (0, 1))]
    unknown = BlockRef(KEYS[3].end_digest, "f" * 64)  # no record holds this payload
    write_v4(path, specs, texts={3: v4_plan_text([specs[0].ref, unknown])})
    with ReasoningStore.open(path, clock=ManualClock()) as store:
        a5 = store.observation(3)
        assert a5 is not None
        assert a5.prior_plan == PriorPlan(None, 2, plan_chain([specs[0].ref, unknown]))
        plan = plan_on(store)
        assert plan.rejections[0].reason == Reason.ANCESTOR_MISSING  # as v4 named it
        # a1 lies under a5 only through the lost link: it is not replayed beneath it (v4
        # compared a5's text and let it through; the walk cannot, so it is more careful).
        assert decision(plan)[0] == []


def test_a_link_to_a_record_not_older_is_left_empty_never_a_loop(tmp_path: Path) -> None:
    """v4 resolved a ref to its newest record; when that one is newer than the record
    naming it (identical bytes observed again), the link is not made."""
    path = tmp_path / "cache.sqlite"
    specs = [Spec(1), Spec(3, (0,)), Spec(1, (), generation=2)]
    write_v4(path, specs)
    with ReasoningStore.open(path, clock=ManualClock()) as store:
        a3 = store.observation(2)
        assert a3 is not None and a3.prior_plan == PriorPlan(None, 1, plan_chain([specs[0].ref]))
        plan = plan_on(store)
        # a3 is of the old generation: never replayed; the re-observed a1 replays, and a3,
        # generated on a block with that very ref, lies on top of it by its own digest.
        assert decision(plan)[0] == [1]
        assert plan.blocks[0].observation.id == 3


def test_open_intents_and_their_pins_survive_and_are_recovered(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    specs = [Spec(1), Spec(3, (0,))]
    write_v4(path, specs)
    conn = sqlite3.connect(path, isolation_level=None)
    text = v4_plan_text([specs[0].ref, specs[1].ref])
    conn.execute(
        "INSERT INTO intents (id, scope_id, phase, position, start_digest, prior_plan, "
        "prior_plan_count, created_at, deadline_at) VALUES ('open', 1, 'dispatch', 5, ?, ?, "
        "2, 1.0, NULL)",
        (KEYS[5].start_digest, text),
    )
    conn.executemany(
        "INSERT INTO dependencies (intent_id, ancestor_id) VALUES ('open', ?)", [(1,), (2,)]
    )
    conn.close()
    with ReasoningStore.open(path, clock=ManualClock()) as store:
        (intent,) = store.unresolved_intents()
        assert (intent.id, intent.position, intent.start_digest) == (
            "open",
            5,
            KEYS[5].start_digest,
        )
        # Its plan is held by its pins, all kept; a3's ancestry row is gone.
        live = store._conn
        assert live is not None
        pins = live.execute("SELECT intent_id, ancestor_id FROM dependencies").fetchall()
        assert sorted(pins) == [("open", 1), ("open", 2)]
        assert open_enabled(store, NOW).recovered_intents == 1
        assert store.poisoned_starts(1, [KEYS[5].start_digest]) == {KEYS[5].start_digest}


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("not json", 1),
        ('[["' + "a" * 64 + '","' + "b" * 64 + '"]]', 2),  # count disagrees
        ('[["' + "a" * 64 + '", "' + "b" * 64 + '"]]', 1),  # another spelling
        ('[["' + "A" * 64 + '","' + "b" * 64 + '"]]', 1),
        ('[["' + "a" * 64 + '"]]', 1),
        ('{"a": 1}', 1),
        (None, 0),
    ],
)
def test_only_the_one_v4_spelling_of_a_plan_is_read(text: Any, count: int) -> None:
    assert legacy_plan_refs(text, count) is None


def test_the_v4_spelling_reads_back_its_refs() -> None:
    refs = (BlockRef("a" * 64, "b" * 64), BlockRef("c" * 64, "d" * 64))
    assert legacy_plan_refs(v4_plan_text(refs), 2) == refs
    assert legacy_plan_refs("[]", 0) == ()


def test_a_long_v4_session_shrinks_to_links(tmp_path: Path) -> None:
    """The quadratic v4 shape (each record's whole ancestry, a row per ancestor) becomes
    one link per record, and the file's pages are reused for new records."""
    path = tmp_path / "cache.sqlite"
    path.parent.mkdir(exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    migrate_to(conn, 4)
    conn.execute("INSERT INTO meta (key, value) VALUES ('secret', ?)", (b"s" * 32,))
    conn.execute(
        "INSERT INTO scopes (digest, credential, model, created_at) VALUES ('d', 'c', 'm', 1)"
    )
    refs = [BlockRef(f"{n:064x}", f"{n + 1000:064x}") for n in range(120)]
    for n, ref in enumerate(refs):
        text = v4_plan_text(refs[:n])
        conn.execute(
            "INSERT INTO observations (scope_id, generation, position, start_digest, "
            "end_digest, envelope_fp, payload_fp, output_hash, prior_plan, prior_plan_count, "
            "prior_plan_digest, replayable, observed_at) "
            "VALUES (1, 1, ?, 's', ?, 'e', ?, 'o', ?, ?, '', 0, 1.0)",
            (n, ref.end_digest, ref.payload_fingerprint, text, n),
        )
    conn.close()
    with ReasoningStore.open(path, clock=ManualClock()) as store:
        walked = store.lineage(1, 120, 200)
        assert [o.ref for o in reversed(walked)] == refs
        assert walked[0].prior_plan == PriorPlan(119, 119, plan_chain(refs[:119]))
        row = store._conn.execute(  # type: ignore[union-attr]
            "SELECT max(length(prior_chain)) FROM observations"
        ).fetchone()
        assert row == (64,)
        assert store._conn.execute("PRAGMA application_id").fetchone() == (  # type: ignore[union-attr]
            APPLICATION_ID,
        )
