"""Canonical JSON (relay.core.canonical), with properties against the independent encoder
in ``tests.support.canonical_reference``."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.core import canonical
from relay.core.canonical import (
    Budget,
    CanonicalLimitExceeded,
    NotCanonicalizable,
    canonical_bytes,
    chunks,
)
from relay.core.limits import CANONICAL_LIMITS, CHUNK_BYTES, CanonicalLimits
from tests.support.canonical_reference import reference
from tests.support.json_values import json_values


def stdlib(value: Any) -> bytes:
    """The format equals this for values without floats (see the canonical docstring)."""
    return json.dumps(
        value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
    ).encode("utf-8")


# --- the format ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"b": 1, "a": 2, "B": 3}, b'{"B":3,"a":2,"b":1}'),  # code-point order: "B" < "a"
        ({"\u00e9": 1, "z": 2, "\U0001f600": 3}, '{"z":2,"\u00e9":1,"\U0001f600":3}'.encode()),
        ([3, 1, 2], b"[3,1,2]"),  # arrays keep their order
        ({"a": [], "b": {}}, b'{"a":[],"b":{}}'),
        ('q"b\\s/', b'"q\\"b\\\\s/"'),
        ("\b\f\n\r\t", b'"\\b\\f\\n\\r\\t"'),
        ("\x00\x1f\x7f", b'"\\u0000\\u001f\x7f"'),  # DEL is not a control escape
        ("\u2028\u2029\u00e9", '"\u2028\u2029\u00e9"'.encode()),
        ("\U0001f600", b'"\xf0\x9f\x98\x80"'),
        (2**64 - 1, b"18446744073709551615"),
        (-(2**63), b"-9223372036854775808"),
        (-0, b"0"),
        (True, b"true"),
        (False, b"false"),
        (None, b"null"),
        ((1, "a"), b'[1,"a"]'),
    ],
)
def test_format(value: Any, expected: bytes) -> None:
    assert canonical_bytes(value) == expected
    assert canonical_bytes(value) == stdlib(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.0, b"1.0"),
        (-0.0, b"-0.0"),
        (0.1, b"0.1"),
        (1e16, b"1e+16"),
        (1e-05, b"0.00001"),  # orjson's float text, not float.__repr__
        (2.5e-9, b"2.5e-9"),
        ([0.5, {"x": -1.25}], b'[0.5,{"x":-1.25}]'),
    ],
)
def test_float_format(value: Any, expected: bytes) -> None:
    assert canonical_bytes(value) == expected
    assert json.loads(expected) == value


def test_no_whitespace_and_nested_sorting() -> None:
    value = {"z": {"y": [1, {"b": None, "a": True}], "x": "v"}, "a": 0}
    assert canonical_bytes(value) == b'{"a":0,"z":{"x":"v","y":[1,{"a":true,"b":null}]}}'


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (math.nan, "number"),
        (math.inf, "number"),
        ({"a": [-math.inf]}, "number"),
        (2**64, "number"),  # beyond 64 bits
        (-(2**63) - 1, "number"),
        pytest.param(10**5000, "number", id="huge-int"),  # beyond the int-to-str limit
        ("\ud800", "string"),  # a lone surrogate has no UTF-8 form
        ({"a": ["ok", "\udfff"]}, "string"),
        ({"\ud800": 1}, "string"),
        ({1: "a"}, "key"),
        ({("a",): 1}, "key"),
        ({"a"}, "type"),
        (b"bytes", "type"),
        (object(), "type"),
    ],
)
def test_values_json_cannot_carry_exactly_are_refused(value: Any, reason: str) -> None:
    with pytest.raises(NotCanonicalizable) as refused:
        Budget().measure(value)
    assert refused.value.reason == reason


# --- measuring -------------------------------------------------------------------------


LONG_ASCII = ('line "quoted" \\ back\tslash\n' * 400) + "\x01\x7f\b\f\r"
LONG_MIXED = ("ascii part " * 700) + ("\u00e9\u4e2d\U0001f600\x02" * 3000)


@pytest.mark.parametrize(
    "value",
    [
        LONG_ASCII,
        LONG_MIXED,
        {"content": LONG_ASCII, LONG_MIXED: [LONG_MIXED, 1, 2.5, None]},
        ["x" * 300, "y" * 70_000, "\n" * 70_000],
        {"k" * 300: "v" * 300},
    ],
)
def test_measured_size_is_exact(value: Any) -> None:
    size = Budget().measure(value)
    assert size == len(stdlib(value))


def test_byte_limit_is_exact_and_shared() -> None:
    budget = Budget(CanonicalLimits(max_bytes=10))
    assert budget.measure("123456") == 8
    assert budget.measure(12) == 2  # exactly at the limit
    with pytest.raises(CanonicalLimitExceeded) as refused:
        budget.measure(1)
    assert refused.value.reason == "bytes"


def test_a_long_string_over_the_room_is_refused_without_encoding_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fail(value: Any, **options: Any) -> bytes:
        raise AssertionError("encoded a string that could never fit")

    monkeypatch.setattr(canonical, "_dumps", fail)
    with pytest.raises(CanonicalLimitExceeded):
        Budget(CanonicalLimits(max_bytes=1000)).measure("\u00e9" * 2000)


@pytest.mark.parametrize(
    ("value", "nodes"),
    [(1, 1), ([1, 2], 3), ({"a": [1, {"b": None}]}, 5), ({}, 1), ("text", 1)],
)
def test_node_count(value: Any, nodes: int) -> None:
    budget = Budget()
    budget.measure(value)
    assert budget.nodes == nodes
    Budget(CanonicalLimits(max_nodes=nodes)).measure(value)
    with pytest.raises(CanonicalLimitExceeded) as refused:
        Budget(CanonicalLimits(max_nodes=nodes - 1)).measure(value)
    assert refused.value.reason == "nodes"


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def test_depth_limit() -> None:
    Budget().measure(nested(CANONICAL_LIMITS.max_depth))
    with pytest.raises(CanonicalLimitExceeded) as refused:
        Budget().measure(nested(CANONICAL_LIMITS.max_depth + 1))
    assert refused.value.reason == "depth"


def test_a_cycle_is_refused_by_depth() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(CanonicalLimitExceeded):
        Budget().measure(cycle)


# --- emitting --------------------------------------------------------------------------


def test_a_large_value_is_emitted_in_bounded_chunks() -> None:
    value = {"content": LONG_ASCII * 20, "parts": [LONG_MIXED, {"k" * 9000: LONG_MIXED}]}
    size = Budget().measure(value)
    pieces = list(chunks(value, size))
    assert len(pieces) >= size // CHUNK_BYTES + 1
    assert all(0 < len(piece) <= CHUNK_BYTES for piece in pieces)
    assert b"".join(pieces) == stdlib(value)
    assert size == len(b"".join(pieces))


def test_a_small_value_is_one_chunk() -> None:
    value = {"role": "user", "content": "hi"}
    assert list(chunks(value, Budget().measure(value))) == [stdlib(value)]


def test_the_streaming_path_writes_the_fast_paths_bytes() -> None:
    value = {"b": [1, 2.5, None, True, False, "x\n\u00e9"], "a": {"\U0001f600": -0.0}}
    assert b"".join(canonical._pieces(value)) == canonical_bytes(value)


# --- properties (hypothesis) ------------------------------------------------------------------

long_text = st.text(st.sampled_from('ab\n"\\\t\x01\x7f\u00e9\u4e2d\U0001f600'), max_size=9000)


def shuffled(value: Any, rng: random.Random) -> Any:
    """The same JSON value with every object's insertion order shuffled."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {key: shuffled(item, rng) for key, item in items}
    if isinstance(value, list):
        return [shuffled(item, rng) for item in value]
    return value


@given(json_values, st.randoms(use_true_random=False))
def test_canonical_output_ignores_insertion_order(value: Any, rng: random.Random) -> None:
    assert canonical_bytes(shuffled(value, rng)) == canonical_bytes(value)


@given(json_values | long_text | st.dictionaries(long_text, long_text, max_size=3))
@settings(max_examples=200)
def test_canonical_output_is_the_documented_encoding_and_measured_exactly(
    value: Any,
) -> None:
    out = canonical_bytes(value)
    assert out == reference(value)
    assert json.loads(out) == value
    assert Budget().measure(value) == len(out)
    assert b"".join(canonical._pieces(value)) == out  # the streaming path agrees


# --- render_document: the one-pass form of measure() for objects and arrays ---------------
# Its oracle is Budget.measure (the walk it replaces) plus the reference encoder: for any
# value, it either renders exactly the reference bytes and charges exactly what measure
# charges, or returns None having charged nothing (and measure then decides).


class Text(str):
    pass


class Count(int):
    pass


inexact = st.sampled_from(
    [Text("a"), Count(1), float("nan"), float("inf"), 2**64, b"x", {"a"}, object(), 1j]
)
containers = st.recursive(
    json_values | inexact,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(
            st.text(max_size=5) | st.integers(0, 3) | st.builds(Text), inner, max_size=4
        )
    ),
    max_leaves=20,
).filter(lambda value: type(value) in (dict, list))


def charges(limits: CanonicalLimits, value: Any) -> tuple[int, int] | str:
    """What measure() charges for ``value``, or the reason it refuses."""
    budget = Budget(limits, bytes_used=7, nodes_used=3)
    try:
        budget.measure(value)
    except (CanonicalLimitExceeded, NotCanonicalizable) as refused:
        return refused.reason
    return budget.bytes, budget.nodes


@given(
    containers,
    st.sampled_from(
        [CANONICAL_LIMITS, CanonicalLimits(max_depth=2), CanonicalLimits(max_nodes=12),
         CanonicalLimits(max_bytes=60)]
    ),
)  # fmt: skip
@settings(max_examples=400)
def test_render_document_agrees_with_measure(value: Any, limits: CanonicalLimits) -> None:
    budget = Budget(limits, bytes_used=7, nodes_used=3)
    text = budget.render_document(value)
    measured = charges(limits, value)
    if text is None:
        assert (budget.bytes, budget.nodes) == (7, 3)  # nothing charged
        return
    assert text == reference(value)
    assert (budget.bytes, budget.nodes) == measured


@pytest.mark.parametrize(
    "value",
    [
        {"tools": [{"type": "function", "name": "read", "parameters": {"type": "object"}}]},
        [{"a": [1, 2.5, None, True]}, "x" * 100],
        {"nested": nested(10)},
    ],
)
def test_render_document_takes_the_one_pass_path(
    value: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    measured = charges(CANONICAL_LIMITS, value)

    def walked(*args: Any) -> Any:
        raise AssertionError("measure()'s walk ran")

    monkeypatch.setattr(canonical, "_size", walked)
    budget = Budget(bytes_used=7, nodes_used=3)
    assert budget.render_document(value) == reference(value)
    assert (budget.bytes, budget.nodes) == measured


@pytest.mark.parametrize(
    "value",
    [
        {"x": float("nan")},  # orjson would write null
        [float("-inf")],
        {"k": Text("v")},  # orjson would render these as their values
        [Count(2)],
        {Text("k"): 1},
        nested(70),  # deeper than max_depth
        ["\ud800"],
        [2**64],
        {"long": "x" * (CHUNK_BYTES // 6)},  # not provably one chunk: measured and streamed
    ],
)
def test_render_document_leaves_the_rest_to_measure(value: Any) -> None:
    budget = Budget()
    assert budget.render_document(value) is None
    assert (budget.bytes, budget.nodes) == (0, 0)
