"""Prior plans as chain links: a digest that commits to the ordered refs, one link each."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.core import records
from relay.core.records import (
    EMPTY_CHAIN,
    EMPTY_PLAN,
    BlockRef,
    Observation,
    PriorPlan,
    chain_digest,
    plan_chain,
)


def h(n: object) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest()


hex_digests = st.binary(min_size=32, max_size=32).map(bytes.hex)
refs_lists = st.lists(st.builds(BlockRef, hex_digests, hex_digests), max_size=12)


def observation(id_: int, ref: BlockRef, prior: PriorPlan) -> Observation:
    return Observation(
        id_, 1, 1, id_, h("start"), ref.end_digest, h("env"), ref.payload_fingerprint,
        h("out"), prior, None, None, True, 0.0,
    )  # fmt: skip


@given(refs_lists)
def test_the_chain_digest_folds_each_ref_onto_the_one_before(refs: list[BlockRef]) -> None:
    chain = EMPTY_CHAIN
    for ref in refs:
        expected = hashlib.sha256(
            (chain + ref.end_digest + ref.payload_fingerprint).encode()
        ).hexdigest()
        assert chain_digest(chain, ref) == expected
        chain = expected
    assert plan_chain(refs) == chain


@given(refs_lists, refs_lists)
def test_equal_chain_digests_mean_equal_plans(
    first: list[BlockRef], second: list[BlockRef]
) -> None:
    assert (plan_chain(first) == plan_chain(second)) == (first == second)


@given(refs_lists)
def test_each_record_links_to_its_plan_and_its_chain_plan_extends_it(refs: list[BlockRef]) -> None:
    """Records built as the session builds them: each on the chain of the one before."""
    prior = EMPTY_PLAN
    for index, ref in enumerate(refs, start=1):
        record = observation(index, ref, prior)
        assert record.prior_plan.well_formed
        prior = record.chain_plan
        assert prior == PriorPlan(index, index, plan_chain(refs[:index]))


@pytest.mark.parametrize(
    "plan",
    [
        PriorPlan(None, 0, h(1)),  # empty, with another digest
        PriorPlan(3, 0, EMPTY_CHAIN),  # empty, with a link
        PriorPlan(3, 1, h(1).upper()),  # not lowercase hex
        PriorPlan(3, 1, ""),  # retired by the v5 migration
        PriorPlan(3, -1, h(1)),
    ],
)
def test_fields_that_describe_no_plan_are_not_well_formed(plan: PriorPlan) -> None:
    assert not plan.well_formed


def test_the_empty_plan() -> None:
    assert PriorPlan(None, 0, plan_chain([])) == EMPTY_PLAN and EMPTY_PLAN.well_formed
    assert PriorPlan(1, 1, h(2)).well_formed
    assert PriorPlan(None, 1, h(2)).well_formed  # a lost link: its ancestors are missing


@given(refs_lists)
def test_a_remembered_chain_digest_is_the_computed_one(refs: list[BlockRef]) -> None:
    """Folding the same links again (as every plan of a conversation does) answers from
    the memo what the first fold computed; a full memo is cleared, never grown."""
    first = [chain_digest(EMPTY_CHAIN, ref) for ref in refs]
    assert [chain_digest(EMPTY_CHAIN, ref) for ref in refs] == first
    assert len(records._CHAIN_MEMO) <= records.CHAIN_MEMO_ENTRIES


def test_only_string_arguments_are_remembered() -> None:
    """A damaged row may hold 1 where another holds 1.0: equal as keys, not as text."""
    ref = BlockRef(h("end"), h("payload"))
    as_int = chain_digest(1, ref)  # type: ignore[arg-type]
    as_float = chain_digest(1.0, ref)  # type: ignore[arg-type]
    assert (
        as_int == hashlib.sha256(f"1{ref.end_digest}{ref.payload_fingerprint}".encode()).hexdigest()
    )
    assert as_float != as_int
    remembered: set[tuple[object, ...]] = set(records._CHAIN_MEMO)
    assert (1, ref.end_digest, ref.payload_fingerprint) not in remembered


def test_the_memo_is_cleared_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records, "CHAIN_MEMO_ENTRIES", 4)
    monkeypatch.setattr(records, "_CHAIN_MEMO", {})
    for n in range(9):
        chain_digest(EMPTY_CHAIN, BlockRef(h(n), h("p")))
        assert len(records._CHAIN_MEMO) <= 4
