"""The planning memo (core/plan_memo, design §21): planning with it returns exactly what
planning without it returns, cold or warm, from this history or another, after any change
to the store; and a warm plan derives only what its verdict does not cover.

Planned over a real SQLite store (the rows an entry is compared with are the objects the
store builds from its rows), with the session's rules for what a turn records.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relay.clock import ManualClock
from relay.core.history_digest import HistoryDigests, history_digests
from relay.core.hot_blocks import HotBlocks
from relay.core.plan_memo import ChainVerdict, PlanMemo
from relay.core.planner import Plan, PlanLimits, plan_replay
from relay.core.receipts import Reason
from relay.core.records import EMPTY_PLAN, MarkerKind, Observation
from relay.storage.replay_store import ReasoningStore
from relay.storage.scoped_source import ScopedSource
from tests.support.canonical_reference import identity_scope
from tests.support.store_rows import TARGET, conn_of, h
from tests.unit.core.test_planner import function_call, message, reasoning, tool_call

NOW = 1_800_000_000.0
SCOPE = identity_scope()
TURNS = 6  # assistant messages in the conversation; odd turns call a tool


def conversation(turns: int = TURNS) -> list[dict[str, Any]]:
    """user, assistant (text, or a tool call and its result), ... and a last question."""
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"question {turn}"})
        if turn % 2:
            call = f"call_{turn}"
            messages.append({"role": "assistant", "content": None, "tool_calls": [tool_call(call)]})
            messages.append({"role": "tool", "tool_call_id": call, "content": f"data {turn}"})
        else:
            messages.append({"role": "assistant", "content": f"answer {turn}"})
    messages.append({"role": "user", "content": "and now?"})
    return messages


def block_items(turn: int) -> list[dict[str, Any]]:
    if turn % 2:
        return [reasoning(str(turn)), function_call(str(turn), f"call_{turn}")]
    return [reasoning(str(turn)), message(str(turn), f"answer {turn}")]


class Conversation:
    """A store holding one record per assistant turn, each generated with every earlier
    one replayed (as the session records them), and the history digests to plan with."""

    def __init__(self, store: ReasoningStore, *, limit: int | None = None) -> None:
        """``limit``: the plan limit the turns were made under: past it, every turn was
        generated on the last chain that fits (the planner offers nothing longer)."""
        self.store = store
        self.messages = conversation()
        self.history = history_digests(SCOPE, self.messages)
        self.scope = store.scope_for(h("a"), TARGET)
        self.records: list[Observation] = []
        with store.transaction():
            for turn, key in enumerate(self.history.assistant_blocks):
                prior = self.records[: limit or len(self.records)]
                self.records.append(self.add(turn, key.position, prior))

    def add(self, turn: int, position: int, prior: list[Observation]) -> Observation:
        key = {b.position: b for b in self.history.assistant_blocks}[position]
        text = json.dumps(block_items(turn), separators=(",", ":"))
        observation = self.store.add_observation(
            scope_id=self.scope.id, generation=self.scope.generation, position=position,
            start_digest=key.start_digest, end_digest=key.end_digest,
            envelope_fingerprint=key.envelope_fingerprint,
            payload_fingerprint=hashlib.sha256(b"p" + text.encode()).hexdigest(),
            output_hash=hashlib.sha256(text.encode()).hexdigest(),
            prior_plan=prior[-1].chain_plan if prior else EMPTY_PLAN,
            intent_id=f"intent_{turn}", snapshot=None, replayable=True, now=NOW - 10,
        )  # fmt: skip
        self.store.put_payload(observation.id, text, NOW - 10)
        return observation

    def history_at(self, turns: int) -> tuple[HistoryDigests, list[dict[str, Any]]]:
        """The visible history up to (not including) assistant turn ``turns``, ending
        with a question: an earlier request of the conversation."""
        if turns >= TURNS:
            return self.history, self.messages
        messages = self.messages[: self.history.assistant_blocks[turns].position]
        return history_digests(SCOPE, messages), messages

    def plan(
        self, turns: int, *, memo: PlanMemo | None, hot: HotBlocks | None, **limits: Any
    ) -> Plan:
        history, messages = self.history_at(turns)
        scope = self.store.scope_for(h("a"), TARGET)  # its generation as stored now
        with self.store.transaction():
            return plan_replay(
                history, messages, ScopedSource(self.store, scope.id),
                generation=scope.generation, now=NOW, limits=PlanLimits(**limits),
                hot=hot, memo=memo,
            )  # fmt: skip

    def sql(self, statement: str, *params: object) -> None:
        conn_of(self.store).execute(statement, params)

    def rewrite_payload(self, record: Observation, items: list[dict[str, Any]]) -> None:
        """Another sound block in the record's place (its row names the new bytes' hash)."""
        text = json.dumps(items, separators=(",", ":"))
        self.sql("UPDATE payloads SET output_json = ? WHERE observation_id = ?", text, record.id)
        digest = hashlib.sha256(text.encode()).hexdigest()
        self.sql("UPDATE observations SET output_hash = ? WHERE id = ?", digest, record.id)


@contextmanager
def stored_conversation(*, limit: int | None = None) -> Iterator[Conversation]:
    with tempfile.TemporaryDirectory() as data:
        store = ReasoningStore.open(Path(data) / "replay.db", clock=ManualClock())
        try:
            yield Conversation(store, limit=limit)
        finally:
            store.close()


@pytest.fixture
def talk() -> Iterator[Conversation]:
    with stored_conversation() as conversation_store:
        yield conversation_store


# --- what a step does to the store (each one a kind of change the memo must notice) ------

TAMPERED_COLUMNS = {
    "chain": "UPDATE observations SET prior_chain = upper(prior_chain) WHERE id = ?",
    # still a well-formed digest, but not the one its parent's chain folds to
    "chain_rotated": "UPDATE observations "
    "SET prior_chain = substr(prior_chain, 2) || substr(prior_chain, 1, 1) WHERE id = ?",
    "count": "UPDATE observations SET prior_plan_count = prior_plan_count + 1 WHERE id = ?",
    "parent": "UPDATE observations SET parent_id = NULL WHERE id = ?",
    "position": "UPDATE observations SET position = position + 1 WHERE id = ?",
    "end": "UPDATE observations SET end_digest = start_digest WHERE id = ?",
    "envelope": "UPDATE observations SET envelope_fp = start_digest WHERE id = ?",
    "payload_fp": "UPDATE observations SET payload_fp = start_digest WHERE id = ?",
    "output_hash": "UPDATE observations SET output_hash = start_digest WHERE id = ?",
    "generation": "UPDATE observations SET generation = 0 WHERE id = ?",
    "replayable": "UPDATE observations SET replayable = 0 WHERE id = ?",
    "intent": "UPDATE observations SET intent_id = 'other' WHERE id = ?",
    "restored": "UPDATE observations SET replayable = 1 WHERE id = ?",
}
PAYLOAD_CHANGES = {
    "removed": "DELETE FROM payloads WHERE observation_id = ?",
    "bytes": "UPDATE payloads SET output_json = replace(output_json, 'enc-', 'enX-') "
    "WHERE observation_id = ?",
    "expired": "UPDATE payloads SET touched_at = 0 WHERE observation_id = ?",
    "renewed": "UPDATE payloads SET touched_at = touched_at + 1 WHERE observation_id = ?",
}


INTENT_IDS = itertools.count()


def apply(talk: Conversation, step: tuple[Any, ...]) -> None:
    kind, turn = step[0], step[1] % TURNS
    record = talk.records[turn]
    store = talk.store
    if kind == "row":
        talk.sql(TAMPERED_COLUMNS[step[2]], record.id)
    elif kind == "payload":
        talk.sql(PAYLOAD_CHANGES[step[2]], record.id)
    elif kind == "duplicate":  # turn 0's reasoning item again: a duplicate once both replay
        talk.rewrite_payload(record, [reasoning("0"), *block_items(turn)[1:]])
    elif kind == "calls":  # a sound block whose call is not the visible one
        talk.rewrite_payload(record, [reasoning(str(turn)), function_call(str(turn), "call_x")])
    elif kind == "marker":
        marker = MarkerKind(step[2])
        digest = record.start_digest if marker == MarkerKind.START_POISON else record.end_digest
        with store.transaction():
            store.add_marker(talk.scope.id, marker, digest, record.position, NOW)
    elif kind == "intent":
        with store.transaction():
            store.create_intent(
                f"competing_{next(INTENT_IDS)}", scope_id=talk.scope.id,
                position=record.position, start_digest=record.start_digest, now=NOW,
            )  # fmt: skip
    elif kind == "generation":
        with store.transaction():
            store.advance_generations([talk.scope.id])
    elif kind == "later":  # a record at a later turn generated without the chain below it
        with store.transaction():
            talk.add(turn, record.position, [])
    elif kind == "grafted":  # a record made on another chain: shorter, or one reaching past it
        with store.transaction():
            talk.add(turn, record.position, talk.records[: step[2]])
    elif kind == "forget_rows":  # the store builds every row afresh (its memo evicted)
        store._built.clear()


steps = st.one_of(
    st.tuples(st.just("row"), st.integers(0, TURNS - 1), st.sampled_from(sorted(TAMPERED_COLUMNS))),
    st.tuples(st.just("payload"), st.integers(0, TURNS - 1), st.sampled_from(sorted(PAYLOAD_CHANGES))),
    st.tuples(st.sampled_from(["duplicate", "calls"]), st.integers(0, TURNS - 1)),
    st.tuples(st.just("marker"), st.integers(0, TURNS - 1), st.sampled_from(list(MarkerKind))),
    st.tuples(st.just("intent"), st.integers(0, TURNS - 1)),
    st.tuples(st.just("generation"), st.just(0)),
    st.tuples(st.just("later"), st.integers(0, TURNS - 1)),
    st.tuples(st.just("grafted"), st.integers(0, TURNS - 1), st.integers(1, TURNS)),
    st.tuples(st.just("forget_rows"), st.just(0)),
)  # fmt: skip
# Between changes, plans of the conversation's requests: its whole history or an earlier one.
plans = st.lists(st.integers(1, TURNS), min_size=1, max_size=3)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    script=st.lists(st.tuples(plans, steps), min_size=1, max_size=6),
    small_plans=st.booleans(),
    capped=st.booleans(),
    hot_too=st.booleans(),
)
def test_planning_with_the_memo_is_planning_without_it(
    script: list[tuple[list[int], tuple[Any, ...]]], small_plans: bool, capped: bool,
    hot_too: bool,
) -> None:  # fmt: skip
    """Cold, warm, warm from another history, after each change to the store: the same
    blocks, rejections (reason, position, record), unmatched count and validated records
    with their touches."""
    memo = PlanMemo()
    hot = HotBlocks(1 << 20) if hot_too else None
    # A small plan limit makes the budget and the plan-length rule part of the search;
    # ``capped``: the turns were made under that limit (a plan that stops growing).
    limits = {"max_plan_records": 3} if small_plans else {}
    with stored_conversation(limit=3 if capped else None) as talk:
        for turns_list, step in script:
            for turns in turns_list:
                remembered = talk.plan(turns, memo=memo, hot=hot, **limits)
                assert remembered == talk.plan(turns, memo=None, hot=None, **limits)
            apply(talk, step)
        for turns in range(1, TURNS + 1):
            assert talk.plan(turns, memo=memo, hot=hot, **limits) == talk.plan(
                turns, memo=None, hot=None, **limits
            )


def test_a_warm_plan_is_the_remembered_chain_and_checks_only_the_new_link(
    talk: Conversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turn by turn, each plan's chain but its newest block is the previous plan's: those
    links are not derived again (one per plan), and the same plan again derives none."""
    from relay.core import planner

    derived: list[int] = []
    links = planner._links

    def counting(parent: Observation, child: Observation) -> bool:
        derived.append(child.id)
        return links(parent, child)

    monkeypatch.setattr(planner, "_links", counting)
    memo = PlanMemo()
    talk.plan(2, memo=memo, hot=None)  # cold: the chain of turn 1 (one link)
    assert derived == [talk.records[1].id] and memo.hits == 0
    for turns in range(3, TURNS + 1):
        derived.clear()
        plan = talk.plan(turns, memo=memo, hot=None)
        assert [b.observation for b in plan.blocks] == talk.records[:turns]
        assert derived == [talk.records[turns - 1].id]  # the new block's link only
    derived.clear()
    again = talk.plan(TURNS, memo=memo, hot=None)  # the same request again: nothing derived
    assert derived == []
    assert again == talk.plan(TURNS, memo=None, hot=None)
    assert memo.hits == TURNS - 1


def test_at_the_plan_limit_each_turn_replays_the_last_chain_that_fits_from_the_memo() -> None:
    """Past the limit the newest records' chains are too long, so every turn's plan is the
    last chain that fits: the memo covers all of it, turn after turn."""
    with stored_conversation(limit=3) as talk:
        memo = PlanMemo()
        for turns in range(3, TURNS + 1):
            plan = talk.plan(turns, memo=memo, hot=None, max_plan_records=3)
            assert plan == talk.plan(turns, memo=None, hot=None, max_plan_records=3)
            assert [b.observation for b in plan.blocks] == talk.records[:3]
        assert memo.hits == TURNS - 3  # every turn after the first that reached the limit


def test_a_warm_plan_reads_its_ancestors_by_id_in_one_query(talk: Conversation) -> None:
    """The previous plan's chain is read by id (the rows the walk would read): no
    recursive walk once the memo names them."""
    memo = PlanMemo()
    talk.plan(TURNS - 1, memo=memo, hot=None)
    calls: list[str] = []
    store = talk.store
    for name in ("lineage", "observations_by_id"):
        method = getattr(store, name)

        def spy(*args: Any, _name: str = name, _method: Any = method, **kwargs: Any) -> Any:
            calls.append(_name)
            return _method(*args, **kwargs)

        setattr(store, name, spy)
    plan = talk.plan(TURNS, memo=memo, hot=None)
    assert [b.observation.id for b in plan.blocks] == [r.id for r in talk.records]
    assert calls == ["observations_by_id"]


def test_a_changed_row_is_not_covered_by_its_old_verdict(talk: Conversation) -> None:
    """The verdict is the old row's: a row changed in the store is read as another object
    and its links and order are derived again (here: refused as before)."""
    memo = PlanMemo()
    assert len(talk.plan(TURNS, memo=memo, hot=None).blocks) == TURNS
    talk.sql(TAMPERED_COLUMNS["chain"], talk.records[2].id)
    plan = talk.plan(TURNS, memo=memo, hot=None)
    assert plan == talk.plan(TURNS, memo=None, hot=None)
    assert [r.reason for r in plan.rejections][:1] == [Reason.ANCESTOR_REORDERED]


def test_a_new_block_on_a_remembered_chain_has_its_own_link_checked(
    talk: Conversation,
) -> None:
    """The previous turn's verdict covers the chain beneath the new block, never the new
    block's link to it: a well-formed chain digest that its parent's chain does not fold
    to is refused, as without the memo."""
    memo = PlanMemo()
    talk.plan(TURNS - 1, memo=memo, hot=None)
    newest, parent = talk.records[-1], talk.records[-2]
    talk.sql(TAMPERED_COLUMNS["chain_rotated"], newest.id)
    plan = talk.plan(TURNS, memo=memo, hot=None)
    assert plan == talk.plan(TURNS, memo=None, hot=None)
    assert memo.hits == 0  # the chain beneath was covered, but the plan failed
    first = plan.rejections[0]
    assert (first.reason, first.observation_id) == (Reason.ANCESTOR_REORDERED, parent.id)


def test_a_verdict_whose_item_keys_differ_covers_no_item_check(talk: Conversation) -> None:
    """Item ids are compared with the verdict's, block by block (they follow from the
    bytes, which follow from the row's hash; compared anyway): a verdict naming other
    keys leaves the whole chain's item check to be done, which finds the duplicate."""
    talk.rewrite_payload(talk.records[1], [reasoning("0"), *block_items(1)[1:]])
    expected = talk.plan(2, memo=None, hot=None)
    assert [r.reason for r in expected.rejections][:1] == [Reason.DUPLICATE_ITEM]
    memo = PlanMemo()
    forged = ChainVerdict(
        tuple(talk.store.lineage(talk.scope.id, talk.records[0].id, 1)),
        ((("id", "rs_elsewhere"),),), frozenset(),
    )  # fmt: skip
    memo.put(forged)
    assert talk.plan(2, memo=memo, hot=None) == expected


def test_the_memo_stays_bounded() -> None:
    memo = PlanMemo(entries=2)
    rows = [
        Observation(n, 1, 1, n, h(n), h(n + 1), h("e"), h("p"), h("o"), EMPTY_PLAN, None,
                    None, True, 0.0)
        for n in range(1, 5)
    ]  # fmt: skip
    for row in rows:
        memo.put(ChainVerdict((row,), ((("id", f"rs_{row.id}"),),), frozenset()))
    assert len(memo) == 2
    assert memo.get(1) is None and memo.get(4) is not None
