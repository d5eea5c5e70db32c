"""The replay planner over an in-memory record source: plans, fallbacks and receipts."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from relay.core import planner
from relay.core.history_digest import HistoryDigests, history_digests
from relay.core.hot_blocks import HotBlocks
from relay.core.json_bytes import RawItems
from relay.core.planner import Plan, PlanLimits, plan_replay
from relay.core.receipts import Reason
from relay.core.records import (
    EMPTY_PLAN,
    Observation,
    OversizedPayload,
    PriorPlan,
    StoredPayload,
    plan_chain,
)
from tests.support.canonical_reference import identity_scope

NOW = 1_800_000_000.0
SCOPE = identity_scope()


@dataclass
class MemorySource:
    """A RecordSource double: what the store would answer for one scope."""

    observations: list[Observation] = field(default_factory=list)
    payloads: dict[int, StoredPayload] = field(default_factory=dict)
    poisoned: set[str] = field(default_factory=set)
    conflicted: set[str] = field(default_factory=set)
    rejected: set[str] = field(default_factory=set)
    intents: dict[str, set[str]] = field(default_factory=dict)
    latest: str | None = "snap-1"
    seen: dict[str, float] = field(default_factory=dict)
    loads: int = 0
    lineages: list[int] = field(default_factory=list)  # records asked for, per read
    end_reads: list[int] = field(default_factory=list)  # end digests asked for, per read
    end_checks: list[int] = field(default_factory=list)  # ends asked "any record?", per read
    payload_batches: list[int] = field(default_factory=list)  # payloads asked for, per read
    by_id_reads: list[int] = field(default_factory=list)  # records asked for by id, per read

    def observations_ending_at(self, end_digests: Iterable[str]) -> dict[str, list[Observation]]:
        wanted = list(end_digests)
        self.end_reads.append(len(wanted))
        found: dict[str, list[Observation]] = {}
        for o in sorted(self.observations, key=lambda o: -o.id):
            if o.end_digest in wanted:
                found.setdefault(o.end_digest, []).append(o)
        return found

    def ends_with_records(self, end_digests: Iterable[str]) -> set[str]:
        wanted = list(end_digests)
        self.end_checks.append(len(wanted))
        return {o.end_digest for o in self.observations} & set(wanted)

    def lineage(self, observation_id: int, limit: int) -> list[Observation]:
        """As the store walks it: up the parent links while each points to an older row."""
        self.lineages.append(limit)
        by_id = {o.id: o for o in self.observations}
        found: list[Observation] = []
        current = by_id.get(observation_id)
        while current is not None and len(found) < limit:
            found.append(current)
            parent = current.prior_plan.parent_id
            current = by_id.get(parent) if parent is not None and parent < current.id else None
        return found

    def observations_by_id(self, observation_ids: Iterable[int]) -> list[Observation]:
        wanted = list(observation_ids)
        self.by_id_reads.append(len(wanted))
        return [o for o in self.observations if o.id in wanted]

    def poisoned_starts(self, start_digests: Iterable[str]) -> set[str]:
        return self.poisoned & set(start_digests)

    def conflicted_ends(self, end_digests: Iterable[str]) -> set[str]:
        return self.conflicted & set(end_digests)

    def rejected_ends(self, end_digests: Iterable[str]) -> set[str]:
        return self.rejected & set(end_digests)

    def unresolved_intents_at(self, start_digests: Iterable[str]) -> dict[str, set[str]]:
        return {start: set(self.intents[start]) for start in start_digests if start in self.intents}

    def latest_snapshot(self) -> str | None:
        return self.latest

    def snapshot_last_seen(self, snapshot: str) -> float | None:
        return self.seen.get(snapshot)

    def load_payloads(
        self, observation_ids: Iterable[int], *, max_bytes: int
    ) -> dict[int, StoredPayload | OversizedPayload]:
        loaded: dict[int, StoredPayload | OversizedPayload] = {}
        observation_ids = list(observation_ids)
        self.payload_batches.append(len(observation_ids))
        for observation_id in observation_ids:
            payload = self.payloads.get(observation_id)
            if payload is not None:
                too_large = payload.size > max_bytes
                loaded[observation_id] = (
                    OversizedPayload(observation_id, payload.size, max_bytes)
                    if too_large
                    else payload
                )
                self.loads += 1
        return loaded


def reasoning(tag: str) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": f"rs_{tag}",
        "summary": [],
        "encrypted_content": f"enc-{tag}",
    }


def message(tag: str, text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{tag}",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def function_call(tag: str, call_id: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{tag}",
        "call_id": call_id,
        "name": "read",
        "arguments": "{}",
        "status": "completed",
    }


def tool_call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "read", "arguments": "{}"}}


# A conversation: u0, a1 (text), u2, a3 (a tool call), t4 (its result), a5 (text).
MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "hello"},
    {"role": "assistant", "content": "one"},
    {"role": "user", "content": "read it"},
    {"role": "assistant", "content": None, "tool_calls": [tool_call("call_1")]},
    {"role": "tool", "tool_call_id": "call_1", "content": "data"},
    {"role": "assistant", "content": "three"},
    {"role": "user", "content": "next"},
]
BLOCKS = {
    1: [reasoning("1"), message("1", "one")],
    3: [reasoning("3"), function_call("3", "call_1")],
    5: [reasoning("5"), message("5", "three")],
}


def digests(messages: Sequence[Any] = MESSAGES) -> HistoryDigests:
    return history_digests(SCOPE, messages)


class Builder:
    """Records as the session would write them for MESSAGES."""

    def __init__(self) -> None:
        self.source = MemorySource()
        self.hot: HotBlocks | None = None  # the hot cache plans use and fill, if any
        self.history = digests()
        self.keys = {block.position: block for block in self.history.assistant_blocks}

    def record(
        self,
        position: int,
        prior: Sequence[Observation] = (),
        *,
        items: list[dict[str, Any]] | None = None,
        **changes: Any,
    ) -> Observation:
        key = self.keys[position]
        output_json = json.dumps(items or BLOCKS[position], separators=(",", ":"))
        observation = Observation(
            id=len(self.source.observations) + 1,
            scope_id=1,
            generation=1,
            position=position,
            start_digest=key.start_digest,
            end_digest=key.end_digest,
            envelope_fingerprint=key.envelope_fingerprint,
            payload_fingerprint=hashlib.sha256(b"p" + output_json.encode()).hexdigest(),
            output_hash=hashlib.sha256(output_json.encode()).hexdigest(),
            prior_plan=prior[-1].chain_plan if prior else EMPTY_PLAN,
            intent_id=f"intent_{position}",
            snapshot="snap-1",
            replayable=True,
            observed_at=NOW - 10,
        )
        observation = observation._replace(**changes)
        self.source.observations.append(observation)
        stored = output_json.encode()
        self.source.payloads[observation.id] = StoredPayload(
            observation.id, stored, len(stored), NOW - 10
        )
        return observation

    def chain(self) -> tuple[Observation, Observation, Observation]:
        """Three turns, each generated with the earlier ones replayed."""
        a1 = self.record(1)
        a3 = self.record(3, [a1])
        a5 = self.record(5, [a1, a3])
        return a1, a3, a5

    def plan(self, **limits: Any) -> Plan:
        return plan_replay(
            self.history, MESSAGES, self.source, generation=1, now=NOW,
            limits=PlanLimits(**limits), hot=self.hot,
        )  # fmt: skip


def positions(plan: Plan) -> list[int]:
    return [block.observation.position for block in plan.blocks]


def reasons(plan: Plan) -> list[Reason]:
    return [rejection.reason for rejection in plan.rejections]


def test_empty_store_plans_nothing() -> None:
    plan = Builder().plan()
    assert plan.blocks == () and plan.rejections == ()


def test_newest_record_brings_its_recorded_ancestors() -> None:
    b = Builder()
    a1, a3, a5 = b.chain()
    plan = b.plan()
    assert positions(plan) == [1, 3, 5]
    assert plan.refs == (a1.ref, a3.ref, a5.ref)
    assert plan.blocks[1].text == json.dumps(BLOCKS[3], separators=(",", ":")).encode()  # as stored
    assert plan.replay_bytes == sum(b.source.payloads[o.id].size for o in (a1, a3, a5))


def test_a_record_generated_without_its_predecessor_replays_alone() -> None:
    b = Builder()
    b.record(1)
    b.record(3, [])  # a3 was generated while a1 was sent as plain text
    assert positions(b.plan()) == [3]


def test_no_earlier_block_beneath_a_descendant_generated_without_it() -> None:
    b = Builder()
    a1 = b.record(1)
    b.record(3, [], replayable=False)  # a3 was observed, not admitted, made without a1
    plan = b.plan()
    assert plan.blocks == ()
    assert Reason.DESCENDANT_WITHOUT_BLOCK in reasons(plan)
    assert a1.id in [r.observation_id for r in plan.rejections] or plan.rejections


def test_falls_back_to_an_older_coherent_plan() -> None:
    b = Builder()
    a1 = b.record(1)
    a3 = b.record(3, [a1])
    b.record(5, [a1, a3], replayable=False)  # never admitted, generated on top of a1, a3
    plan = b.plan()
    assert positions(plan) == [1, 3]
    assert reasons(plan) == [Reason.NOT_REPLAYABLE]


def test_fallback_stops_where_a_descendant_was_generated_without_the_block() -> None:
    b = Builder()
    a1 = b.record(1)
    b.record(3, [a1])
    b.record(5, [a1], replayable=False)  # generated while a3 went as plain text
    plan = b.plan()
    assert positions(plan) == [1]
    assert reasons(plan) == [Reason.NOT_REPLAYABLE, Reason.DESCENDANT_WITHOUT_BLOCK]


def test_past_the_plan_limit_a_descendant_on_the_chain_is_not_walked_and_damage_still_stops() -> (
    None
):
    # Past the plan-record limit every later record was dispatched on the same fallback
    # chain, so its prior plan is that chain's: compared as is, no link walked.
    b = Builder()
    a1 = b.record(1)
    a3 = b.record(3, [a1])
    a5 = b.record(5, [a1, a3])
    plan = b.plan(max_plan_records=2)  # a5 is one record too long
    assert positions(plan) == [1, 3]
    assert reasons(plan) == [Reason.PLAN_TOO_LONG]
    assert b.source.lineages == [1]  # a3's one ancestor; a5's chain was never read
    _replace(b, a5, prior_plan=_damaged(a5.prior_plan))
    plan = b.plan(max_plan_records=2)
    assert plan.blocks == ()  # a damaged later plan stops every chain beneath it
    assert Reason.DESCENDANT_WITHOUT_BLOCK in reasons(plan)


def test_a_descendant_further_down_a_chain_is_walked_to_the_block() -> None:
    """a5 was generated on a1 and a3; a3 may not replay now (not admitted), so a1 alone is
    proposed: a5 lies on top of it through a3's link, which is walked and checked."""
    b = Builder()
    a1 = b.record(1)
    a3 = b.record(3, [a1], replayable=False)
    b.record(5, [a1, a3])
    plan = b.plan()
    assert positions(plan) == [1]
    assert reasons(plan) == [Reason.NOT_REPLAYABLE, Reason.NOT_REPLAYABLE]


@pytest.mark.parametrize(
    "link",
    [
        pytest.param(lambda a1, a3: PriorPlan(a1.id, 2, a3.chain_plan.chain), id="count"),
        pytest.param(lambda a1, a3: PriorPlan(a1.id, 1, a3.chain_plan.chain), id="parent"),
        pytest.param(lambda a1, a3: PriorPlan(99, 2, a3.chain_plan.chain), id="missing"),
        pytest.param(lambda a1, a3: PriorPlan(None, 2, a3.chain_plan.chain), id="cut"),
    ],
)
def test_a_descendant_whose_links_do_not_lead_to_the_block_stops_it(
    link: Callable[[Observation, Observation], PriorPlan],
) -> None:
    b = Builder()
    a1 = b.record(1)
    a3 = b.record(3, [a1], replayable=False)
    a5 = b.record(5, [a1, a3])
    _replace(b, a5, prior_plan=link(a1, a3))
    plan = b.plan()
    assert plan.blocks == ()
    assert reasons(plan)[-1] == Reason.DESCENDANT_WITHOUT_BLOCK


@pytest.mark.parametrize(
    ("link", "reason"),
    [
        pytest.param(
            lambda a1, a3: PriorPlan(a1.id, 2, a3.chain_plan.chain),
            Reason.ANCESTOR_REORDERED,
            id="to-another",
        ),
        pytest.param(
            lambda a1, a3: PriorPlan(99, 2, a3.chain_plan.chain),
            Reason.ANCESTOR_MISSING,
            id="to-nothing",
        ),
        pytest.param(
            lambda a1, a3: PriorPlan(4, 2, a3.chain_plan.chain),
            Reason.ANCESTOR_MISSING,
            id="to-a-newer-row",
        ),
        pytest.param(
            lambda a1, a3: PriorPlan(a3.id, 2, a1.chain_plan.chain),
            Reason.ANCESTOR_REORDERED,
            id="digest",
        ),
        pytest.param(
            lambda a1, a3: PriorPlan(a3.id, 3, a3.chain_plan.chain),
            Reason.ANCESTOR_REORDERED,
            id="count",
        ),
    ],
)
def test_a_tampered_link_on_the_newest_record_is_named(
    link: Callable[[Observation, Observation], PriorPlan], reason: Reason
) -> None:
    b = Builder()
    a1, a3, a5 = b.chain()
    assert b.record(3, [a1], intent_id="again").id == 4  # a row newer than a5
    _replace(b, a5, prior_plan=link(a1, a3))
    plan = b.plan()
    assert plan.rejections[0].reason == reason
    assert 5 not in positions(plan)


def test_own_intent_does_not_compete_but_another_does() -> None:
    b = Builder()
    a1 = b.record(1)
    b.source.intents[a1.start_digest] = {"intent_1"}  # its own producing intent
    assert positions(b.plan()) == [1]
    b.source.intents[a1.start_digest] = {"intent_1", "intent_other"}
    plan = b.plan()
    assert plan.blocks == () and reasons(plan) == [Reason.COMPETING_INTENT]


def _tamper(b: Builder, o: Observation) -> None:
    payload = b.source.payloads[o.id]
    b.source.payloads[o.id] = payload._replace(
        output_json=payload.output_json.replace(b"enc-", b"enX-")
    )


def _replace(b: Builder, o: Observation, **changes: Any) -> None:
    index = b.source.observations.index(o)
    b.source.observations[index] = o._replace(**changes)


def _payload(b: Builder, o: Observation, items: Any) -> None:
    text = json.dumps(items).encode()
    b.source.payloads[o.id] = StoredPayload(o.id, text, len(text), NOW)
    _replace(b, o, output_hash=hashlib.sha256(text).hexdigest())


def _damaged(plan: PriorPlan) -> PriorPlan:
    """The plan as it would read back after damage to its digest that keeps its length."""
    return dataclasses.replace(plan, chain=plan.chain.upper())


# Mutations of the middle record (a3) of a 3-turn chain: every one must stop the whole
# chain (a5 depends on a3) and fall back to a1 alone, which a3 and a5 were built upon.
MUTATIONS: list[tuple[str, Callable[[Builder, Observation], object], Reason]] = [
    ("tampered-bytes", _tamper, Reason.PAYLOAD_DIGEST_MISMATCH),
    ("payload-gone", lambda b, o: b.source.payloads.pop(o.id), Reason.PAYLOAD_MISSING),
    (
        "expired",
        lambda b, o: b.source.payloads.__setitem__(
            o.id, b.source.payloads[o.id]._replace(touched_at=NOW - 31 * 86400)
        ),
        Reason.RECORD_EXPIRED,
    ),
    ("stale-generation", lambda b, o: _replace(b, o, generation=0), Reason.STALE_GENERATION),
    ("start-poisoned", lambda b, o: b.source.poisoned.add(o.start_digest), Reason.START_POISONED),
    ("end-conflict", lambda b, o: b.source.conflicted.add(o.end_digest), Reason.END_CONFLICT),
    (
        "upstream-rejected",
        lambda b, o: b.source.rejected.add(o.end_digest),
        Reason.UPSTREAM_REJECTED,
    ),
    ("not-replayable", lambda b, o: _replace(b, o, replayable=False), Reason.NOT_REPLAYABLE),
    (
        "envelope-differs",
        lambda b, o: _replace(b, o, envelope_fingerprint="0" * 64),
        Reason.ENVELOPE_MISMATCH,
    ),
    ("ancestor-dropped", lambda b, o: b.source.observations.remove(o), Reason.ANCESTOR_MISSING),
    (
        "ancestor-plan-differs",
        lambda b, o: _replace(b, o, prior_plan=EMPTY_PLAN),
        Reason.ANCESTOR_REORDERED,
    ),
    (
        "ancestor-plan-damaged",  # same length, characters no plan is spelt with
        lambda b, o: _replace(b, o, prior_plan=_damaged(o.prior_plan)),
        Reason.ANCESTOR_REORDERED,
    ),
    (
        "call-swapped",
        lambda b, o: _payload(b, o, [reasoning("3"), function_call("3", "call_9")]),
        Reason.CALL_PAIRING_BROKEN,
    ),
    ("not-json", lambda b, o: _payload(b, o, "not a block"), Reason.PAYLOAD_MALFORMED),
    (
        "no-ciphertext",
        lambda b, o: _payload(
            b, o, [{"type": "reasoning", "id": "rs_3"}, function_call("3", "call_1")]
        ),
        Reason.PAYLOAD_MALFORMED,
    ),
    (
        "duplicated-item",
        lambda b, o: _payload(b, o, [reasoning("1"), function_call("3", "call_1")]),
        Reason.DUPLICATE_ITEM,
    ),
]


@pytest.mark.parametrize("hot", [False, True], ids=["cold", "hot"])
@pytest.mark.parametrize(
    ("mutate", "reason"), [pytest.param(m, r, id=name) for name, m, r in MUTATIONS]
)
def test_a_damaged_ancestor_stops_its_descendants(
    mutate: Callable[[Builder, Observation], object], reason: Reason, hot: bool
) -> None:
    b = Builder()
    _, a3, _ = b.chain()
    if hot:  # every block verified and cached by an earlier plan: damage is still seen
        b.hot = HotBlocks(1 << 20)
        assert positions(b.plan()) == [1, 3, 5] and len(b.hot) == 3
    mutate(b, a3)
    plan = b.plan()
    assert reason in reasons(plan)
    assert 3 not in positions(plan) and 5 not in positions(plan)
    assert positions(plan) in ([], [1])


def test_a_damaged_plan_on_the_newest_record_replays_nothing() -> None:
    """Its own chain is unknown, and so is whether the older records lie beneath it."""
    b = Builder()
    _, _, a5 = b.chain()
    _replace(b, a5, prior_plan=_damaged(a5.prior_plan))
    plan = b.plan()
    assert Reason.NOT_REPLAYABLE in reasons(plan)
    assert Reason.DESCENDANT_WITHOUT_BLOCK in reasons(plan)
    assert positions(plan) == []


def test_snapshot_of_the_determining_record_must_be_latest_or_recent() -> None:
    b = Builder()
    b.record(1, snapshot="snap-0")
    b.source.seen["snap-0"] = NOW - 3600
    assert positions(b.plan()) == [1]  # seen within 24 hours
    b.source.seen["snap-0"] = NOW - 2 * 86400
    plan = b.plan()
    assert plan.blocks == () and reasons(plan) == [Reason.SNAPSHOT_NOT_ACCEPTED]


def test_a_missing_tool_result_breaks_the_pairing() -> None:
    b = Builder()
    b.record(3)
    messages = [m for m in MESSAGES if m.get("role") != "tool"]
    history = digests(messages)
    b.history, b.keys = history, {k.position: k for k in history.assistant_blocks}
    plan = plan_replay(history, messages, b.source, generation=1, now=NOW)
    assert plan.blocks == ()  # the record's identity no longer matches, or pairing fails


@pytest.mark.parametrize(
    ("first_answers", "replayed"),
    [
        pytest.param({"call_1": 4}, [1, 3, 5], id="answered-after-the-call"),
        pytest.param({}, [1], id="unanswered"),
        pytest.param({"call_1": 2}, [1], id="answered-before-the-call"),
        pytest.param({"call_9": 4}, [1], id="another-call-answered"),
    ],
)
def test_each_replayed_call_is_answered_after_it(
    first_answers: dict[str, int], replayed: list[int]
) -> None:
    b = Builder()
    b.chain()
    assert b.history.first_answers == {"call_1": 4}  # from the visible tool message
    b.history = dataclasses.replace(b.history, first_answers=first_answers)
    plan = b.plan()
    assert positions(plan) == replayed
    if replayed == [1]:
        assert Reason.CALL_PAIRING_BROKEN in reasons(plan)


@pytest.mark.parametrize(
    ("limits", "reason"),
    [
        pytest.param({"max_plan_records": 2}, Reason.PLAN_TOO_LONG, id="plan-records"),
        pytest.param({"max_replay_bytes": 300}, Reason.REPLAY_TOO_LARGE, id="replay-bytes"),
    ],
)
def test_budgets_fall_back_without_replaying_a_partial_chain(
    limits: dict[str, int], reason: Reason
) -> None:
    b = Builder()
    b.chain()
    plan = b.plan(**limits)
    assert reason in reasons(plan)
    assert positions(plan) in ([1, 3], [1], [])
    for index, block in enumerate(plan.blocks):  # never a chain missing its ancestors
        assert block.observation.prior_plan.chain == plan_chain(plan.refs[:index])


def test_verification_work_is_bounded() -> None:
    b = Builder()
    a1 = b.record(1)
    for _ in range(30):  # many unreplayable observations at the newest message
        b.record(5, [a1], replayable=False)
    plan = b.plan(max_plan_records=2)  # work budget 8
    assert plan.blocks == ()
    assert reasons(plan)[-1] == Reason.VERIFICATION_BUDGET
    assert len(plan.rejections) <= 9


def test_a_hot_plan_replays_the_same_text_without_checking_it_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    b = Builder()
    b.chain()
    b.hot = HotBlocks(1 << 20)
    first = b.plan()
    checks: list[str] = []
    monkeypatch.setattr(planner, "_check_block", lambda text, record: checks.append(text))
    second = b.plan()
    assert checks == [] and b.hot.hits == 3
    assert positions(second) == [1, 3, 5]
    assert [block.text for block in second.blocks] == [block.text for block in first.blocks]
    assert b.source.loads == 6  # every plan still reads every payload row it replays


def test_a_payload_changed_on_disk_after_it_was_cached_is_verified_again() -> None:
    b = Builder()
    _, a3, _ = b.chain()
    b.hot = HotBlocks(1 << 20)
    b.plan()
    # Rewritten with valid, matching bytes (another payload for the same record): the
    # entry no longer describes the row, so the row is parsed afresh and replayed as is.
    items = [reasoning("3b"), function_call("3b", "call_1")]
    _payload(b, a3, items)
    plan = b.plan()
    assert positions(plan) == [1, 3, 5]
    assert plan.blocks[1].text == json.dumps(items).encode()  # the rewritten row, as stored
    # What is spliced upstream is that row's items too, not the cached entry's.
    assert bytes(plan.blocks[1].items.elements) == bytes(RawItems(plan.blocks[1].text).elements)


def test_a_selected_block_splices_the_items_of_its_verified_text() -> None:
    b = Builder()
    b.chain()
    b.hot = HotBlocks(1 << 20)
    for plan in (b.plan(), b.plan()):  # verified, then served from the hot cache
        for block in plan.blocks:
            assert block.payload.items is not None
            assert bytes(block.items.elements) == bytes(RawItems(block.text).elements)


def test_each_payload_is_loaded_once_per_plan_in_one_batch() -> None:
    b = Builder()
    b.chain()
    b.plan()
    assert b.source.loads == 3
    assert b.source.payload_batches == [3]


def test_the_messages_a_plan_looks_up_are_read_in_few_batches() -> None:
    b = Builder()
    b.chain()
    assert positions(b.plan()) == [1, 3, 5]
    assert b.source.end_reads == [1]  # the newest message decided: nothing else read
    b = Builder()
    a1 = b.record(1)
    b.record(5, [a1], replayable=False)  # a5 fails; a3 unmatched, a1 below it
    assert positions(b.plan()) == [1]
    # The newest message, then the others in one batch; the later-record check of a1 and
    # the unmatched count read nothing more.
    assert b.source.end_reads == [1, 2]


def test_a_plan_far_back_reads_the_messages_in_growing_batches() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for turn in range(60):
        messages += [{"role": "assistant", "content": f"turn {turn}"},
                     {"role": "user", "content": f"more {turn}"}]  # fmt: skip
    history = digests(messages)
    source = MemorySource()
    first = history.assistant_blocks[0]
    output_json = json.dumps([reasoning("0"), message("0", "turn 0")], separators=(",", ":"))
    record = Observation(
        1, 1, 1, first.position, first.start_digest, first.end_digest,
        first.envelope_fingerprint, hashlib.sha256(b"p" + output_json.encode()).hexdigest(),
        hashlib.sha256(output_json.encode()).hexdigest(), EMPTY_PLAN, "intent_1", "snap-1",
        True, NOW - 10,
    )  # fmt: skip
    source.observations.append(record)
    source.payloads[1] = StoredPayload(1, output_json.encode(), len(output_json), NOW - 10)
    plan = plan_replay(history, messages, source, generation=1, now=NOW)
    assert [block.observation.id for block in plan.blocks] == [1]
    assert plan.unmatched == 59
    assert source.end_reads == [1, 16, 17, 26]  # 60 messages: 1, then 16, then doubling


def test_messages_a_plan_skips_are_counted_by_existence_without_reading_them() -> None:
    b = Builder()
    b.record(1)
    b.record(5, [])  # a5 generated while a1 and a3 went as plain text: both skipped
    plan = b.plan()
    assert (positions(plan), plan.unmatched) == ([5], 1)  # a3 has no record; a1 has one
    assert b.source.end_reads == [1]  # the newest message decided: no record read below
    assert b.source.end_checks == [2]  # a1 and a3: whether, in one query


def test_ancestors_are_read_in_one_batch_and_never_twice() -> None:
    b = Builder()
    a1 = b.record(1)
    a3 = b.record(3, [a1])
    b.record(5, [a1, a3], replayable=False)  # rejected: the fallback needs only a1 again
    assert positions(b.plan()) == [1, 3]
    assert b.source.lineages == [2]  # a3 and a1 in one walk; the fallback reread nothing


# --- unmatched: assistant messages no record ends at ("why no replay?") -------------------


def _none(b: Builder) -> None:
    pass


def _chain(b: Builder) -> None:
    b.chain()


def _only_a3(b: Builder) -> None:
    b.record(3, [])  # a1 and a5 went unseen (another client, an edit, an unpredicted echo)


def _a1_and_a3_without_it(b: Builder) -> None:
    b.record(1)
    b.record(3, [])  # a3 generated while a1 went as plain text: a1 is skipped, yet matched


def _a5_not_replayable(b: Builder) -> None:
    b.record(5, [], replayable=False)  # rejected, but it matched


@pytest.mark.parametrize(
    ("records", "replayed", "unmatched"),
    [
        pytest.param(_none, [], 3, id="empty-store"),
        pytest.param(_chain, [1, 3, 5], 0, id="whole-chain"),
        pytest.param(_only_a3, [3], 2, id="newer-and-skipped-unmatched"),
        pytest.param(_a1_and_a3_without_it, [3], 1, id="skipped-but-matched"),
        pytest.param(_a5_not_replayable, [], 2, id="a-rejected-match-is-matched"),
    ],
)
def test_the_plan_counts_assistant_messages_no_record_ends_at(
    records: Callable[[Builder], None], replayed: list[int], unmatched: int
) -> None:
    b = Builder()
    records(b)
    plan = b.plan()
    assert (positions(plan), plan.unmatched) == (replayed, unmatched)


def test_a_budget_refusal_counts_the_messages_examined() -> None:
    b = Builder()
    for _ in range(30):
        b.record(5, [], replayable=False)
    plan = b.plan(max_plan_records=2)  # the budget runs out at a5, before a3 and a1
    assert reasons(plan)[-1] == Reason.VERIFICATION_BUDGET
    assert plan.unmatched == 0


@pytest.mark.parametrize(
    ("validated", "touched", "stale", "due"),
    [
        ((1, 2, 3), (10.0, 20.0, 30.0), 20.0, (1,)),  # strictly older only
        ((1, 2, 3), (10.0, 20.0, 30.0), 31.0, (1, 2, 3)),
        ((1, 2), (10.0, 20.0), 5.0, ()),
        ((1, 2), (), 5.0, (1, 2)),  # no stored touches known: all of them, the store filters
        ((), (), 5.0, ()),
    ],
)
def test_a_dispatch_touches_only_rows_older_than_the_granularity(
    validated: tuple[int, ...], touched: tuple[float, ...], stale: float, due: tuple[int, ...]
) -> None:
    assert Plan(validated=validated, touched=touched).due_touches(stale) == due


def test_a_plan_carries_the_stored_touch_of_each_validated_record() -> None:
    b = Builder()
    b.chain()
    plan = b.plan()
    assert plan.validated
    assert plan.touched == tuple(b.source.payloads[i].touched_at for i in plan.validated)
