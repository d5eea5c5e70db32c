"""PlanText: the one stored spelling of a plan, compared as text and validated once."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.core.records import (
    EMPTY_PLAN,
    MAX_STORED_PLAN,
    BlockRef,
    PlanStamp,
    PlanText,
    plan_digest,
    plan_text_length,
)


def h(n: object) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest()


hex_digests = st.binary(min_size=32, max_size=32).map(bytes.hex)
refs_lists = st.lists(st.builds(BlockRef, hex_digests, hex_digests), max_size=12)


@given(refs_lists)
def test_a_plan_reads_back_from_its_text_alone(refs: list[BlockRef]) -> None:
    plan = PlanText.of(refs)
    assert len(plan.text) == plan_text_length(len(refs))
    assert json.loads(plan.text) == [[r.end_digest, r.payload_fingerprint] for r in refs]
    stored = PlanText(plan.text, plan.count)  # as the store hands it back: unvalidated
    assert stored.refs() == tuple(refs)
    assert stored == plan


@given(refs_lists, st.data())
def test_prefixes_and_extensions_are_the_plans_of_those_records(
    refs: list[BlockRef], data: st.DataObject
) -> None:
    plan = PlanText(PlanText.of(refs).text, len(refs))  # unvalidated: prefix works on text
    k = data.draw(st.integers(0, len(refs)))
    assert plan.prefix(k) == PlanText.of(refs[:k])
    assert plan.starts_with(PlanText.of(refs[:k]))
    extra = BlockRef(h("x"), h("y"))
    assert PlanText.of(refs).extended(extra) == PlanText.of([*refs, extra])
    if refs:
        other = [*refs[:-1], BlockRef(h("other"), refs[-1].payload_fingerprint)]
        assert not plan.starts_with(PlanText.of(other))
        assert not PlanText.of(refs[:-1]).starts_with(plan)  # shorter never starts with longer


@given(refs_lists.filter(bool), st.data())
def test_any_one_character_of_damage_is_caught_or_changes_the_records(
    refs: list[BlockRef], data: st.DataObject
) -> None:
    text = PlanText.of(refs).text
    index = data.draw(st.integers(0, len(text) - 1))
    char = data.draw(st.characters(codec="utf-8").filter(lambda c: c != text[index]))
    damaged = PlanText(text[:index] + char + text[index + 1 :], len(refs))
    read = damaged.refs()
    if char in "0123456789abcdef" and text[index] in "0123456789abcdef":
        assert read is not None and read != tuple(refs)  # another valid plan: unequal
    else:
        assert read is None
    assert damaged != PlanText.of(refs)


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("", 0),
        ("[ ]", 0),
        (PlanText.of([BlockRef(h(1), h(2))]).text, 0),
        (PlanText.of([BlockRef(h(1), h(2))]).text, 2),
        (PlanText.of([BlockRef(h(1), h(2))]).text.upper(), 1),
        (PlanText.of([BlockRef(h(1), h(2))]).text.replace('","', '" ,'), 1),
        (PlanText.of([BlockRef(h(1), h(2))]).text.replace("a", "\x01"), 1),
        (PlanText.of([BlockRef(h(1), h(2))]).text.replace("a", "é"), 1),
        ("[]", MAX_STORED_PLAN + 1),
    ],
)
def test_texts_that_are_not_the_one_spelling_never_read(text: str, count: int) -> None:
    assert PlanText(text, count).refs() is None


@pytest.mark.parametrize(
    "refs",
    [
        [BlockRef("A" * 64, h(1))],
        [BlockRef(h(1), "ab")],
        [BlockRef(h(1), h(2))] * (MAX_STORED_PLAN + 1),
    ],
)
def test_plans_that_would_not_read_back_are_refused(refs: list[BlockRef]) -> None:
    with pytest.raises(ValueError, match="plan"):
        PlanText.of(refs)


def test_the_empty_plan() -> None:
    assert EMPTY_PLAN == PlanText.of([]) == PlanText("[]", 0)
    assert PlanText("[]", 0).refs() == ()
    assert EMPTY_PLAN.extended(BlockRef(h(1), h(2))) == PlanText.of([BlockRef(h(1), h(2))])


@given(refs_lists)
def test_prefix_stamps_are_the_stamps_of_the_prefixes(refs: list[BlockRef]) -> None:
    plan = PlanText.of(refs)
    assert plan.stamp == PlanStamp(len(refs), hashlib.sha256(plan.text.encode()).hexdigest())
    assert plan.stamp.digest == plan_digest(plan.text)
    for count in range(len(refs) + 1):
        assert plan.prefix_stamps(count) == [plan.prefix(i).stamp for i in range(count)]
        assert plan.prefix_stamps(count) == [PlanText.of(refs[:i]).stamp for i in range(count)]


@given(refs_lists, refs_lists)
def test_different_plans_have_different_stamps(
    first: list[BlockRef], second: list[BlockRef]
) -> None:
    assert (PlanText.of(first).stamp == PlanText.of(second).stamp) == (first == second)
