"""Replacing visible assistant messages' input items with original output blocks."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.core.json_bytes import RawItems
from relay.core.replace import replace_blocks

ITEMS = ["u0", "a1", "c1", "t1", "a2", "u3"]
SPANS = [None, (0, 1), (1, 3), (3, 4), (4, 5), (5, 6)]
R1 = RawItems(b'[{"r":1},{"m":1}]')
R2 = RawItems(b'[{"r":2}]')


@pytest.mark.parametrize(
    ("blocks", "expected"),
    [
        ({}, ITEMS),
        ({2: R1}, ["u0", R1, "t1", "a2", "u3"]),
        ({2: R1, 4: R2}, ["u0", R1, "t1", R2, "u3"]),
    ],
)
def test_replace_blocks(blocks: dict[int, RawItems], expected: list[Any]) -> None:
    assert replace_blocks(ITEMS, SPANS, blocks) == expected


def test_the_input_list_is_a_new_one() -> None:
    items = list(ITEMS)
    out = replace_blocks(items, SPANS, {2: R1})
    assert out is not items and items == ITEMS


@pytest.mark.parametrize("position", [0, 9, -1])
def test_a_message_without_items_cannot_be_replaced(position: int) -> None:
    with pytest.raises(ValueError, match="no input items"):
        replace_blocks(ITEMS, SPANS, {position: R2})


def test_overlapping_spans_are_refused() -> None:
    with pytest.raises(ValueError, match="overlap"):
        replace_blocks(ITEMS, [(0, 2), (1, 3)], {0: R1, 1: R2})


def test_empty_span_at_the_end() -> None:
    assert replace_blocks(["u0"], [(0, 1), (1, 1)], {1: R2}) == ["u0", R2]


@given(st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=12), st.data())
def test_untouched_items_keep_their_order(sizes: list[int], data: st.DataObject) -> None:
    items: list[Any] = []
    spans: list[tuple[int, int] | None] = []
    for k, size in enumerate(sizes):
        spans.append((len(items), len(items) + size))
        items.extend(f"m{k}.{i}" for i in range(size))
    chosen = data.draw(st.sets(st.integers(min_value=0, max_value=len(sizes) - 1)))
    blocks = {k: RawItems(f'[{{"block":{k}}}]'.encode()) for k in chosen}
    out = replace_blocks(items, spans, blocks)
    expected: list[Any] = []
    for k, span in enumerate(spans):
        assert span is not None
        expected.extend([blocks[k]] if k in chosen else items[span[0] : span[1]])
    assert out == expected
