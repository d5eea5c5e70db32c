"""The upstream body's encoding: replayed blocks go out as their stored text, verbatim;
the rest as compact JSON of the same value as ``json.dumps`` spells."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.core.json_bytes import RawItems, encode_body

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=12,
)

# An input list: plain items, and runs of items stored as one RawItems.
input_parts = st.lists(
    st.one_of(
        json_values.map(lambda value: ("plain", value)),
        st.lists(json_values, min_size=1, max_size=3).map(lambda items: ("raw", items)),
    ),
    max_size=8,
)


def expanded(body: dict[str, Any]) -> dict[str, Any]:
    """What the encoded body must parse to: every RawItems replaced by its parsed items."""
    items: list[Any] = []
    for item in body["input"]:
        if isinstance(item, RawItems):
            items.extend(json.loads(b"[" + bytes(item.elements) + b"]"))
        else:
            items.append(item)
    return {**body, "input": items}


@pytest.mark.parametrize(
    "body",
    [
        {"model": "gpt-5", "input": [{"role": "user", "content": "hé"}], "store": False},
        {"model": "gpt-5", "input": "just text"},
        {"model": "gpt-5"},
        {},
    ],
)
def test_without_raw_items_it_is_compact_json_dumps(body: dict[str, Any]) -> None:
    compact = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    assert encode_body(body) == compact.encode("utf-8")


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "input": [{"n": 2**64}], "temperature": 0.1},  # beyond 64 bits
        {"model": "m", "input": [{"t": "a\ud800"}], "top_p": 1e-07},  # a lone surrogate
        {"model": "m", "metadata": {1: "x"}, "input": [RawItems(b'[{"a":1}]')]},  # an int key
    ],
)
@pytest.mark.parametrize("piecewise", [False, True])
def test_what_orjson_refuses_is_spelled_by_the_stdlib(
    body: dict[str, Any], piecewise: bool
) -> None:
    encoded = encode_body(body, piecewise=piecewise)
    stdlib = json.loads(json.dumps(expanded(body) if "input" in body else body))
    assert json.loads(encoded) == stdlib
    assert b", " not in encoded and b": " not in encoded


@given(json_values)
def test_the_value_is_what_json_dumps_spells(value: Any) -> None:
    """orjson's spelling (floats included) reads back as the value the stdlib's does."""
    body = {"model": "m", "input": [value], "k": value}
    assert json.loads(encode_body(body)) == json.loads(json.dumps(body))


def test_a_non_finite_float_goes_out_as_null() -> None:
    # Not JSON (the stdlib writes NaN/Infinity, which the upstream refuses); no parsed
    # client body holds one (relay.http.request_body refuses them).
    body = {"model": "m", "input": [], "temperature": float("inf")}
    assert json.loads(encode_body(body)) == {"model": "m", "input": [], "temperature": None}


def test_the_stored_text_is_sent_verbatim() -> None:
    # What a parse and an encode would change: number spelling, escapes, spacing.
    stored = b'[{"type":"reasoning","n":1e5,"s":"\\u00e9","z":-0.0},{"type":"message"}]'
    body = {"model": "m", "input": [{"role": "user"}, RawItems(stored), "t"], "store": False}
    encoded = encode_body(body)
    assert stored[1:-1] in encoded
    assert json.loads(encoded) == expanded(body)


def test_a_body_of_only_input() -> None:
    body = {"input": [RawItems(b'[{"a":1}]'), RawItems(b' [ {"b":2} ] ')]}
    assert json.loads(encode_body(body)) == {"input": [{"a": 1}, {"b": 2}]}


@pytest.mark.parametrize(
    "text", [b"[]", b"[ ]", b" [\n] ", b"{}", b'"x"', b"", b"[", b"]", b"[1", b"1]"]
)
def test_raw_items_need_a_non_empty_array_text(text: bytes) -> None:
    with pytest.raises(ValueError, match="non-empty JSON array"):
        RawItems(text)


def test_raw_items_never_show_their_content() -> None:
    assert "secret" not in repr(RawItems(b'[{"encrypted_content":"secret"}]'))


@given(
    input_parts,
    st.dictionaries(st.text().filter(lambda key: key != "input"), json_values, max_size=3),
    st.sampled_from([(",", ":"), (", ", ": ")]),
)
def test_any_mix_parses_as_the_expanded_body(
    parts: list[tuple[str, Any]], rest: dict[str, Any], separators: tuple[str, str]
) -> None:
    items = [
        RawItems(json.dumps(value, separators=separators).encode()) if kind == "raw" else value
        for kind, value in parts
    ]
    body = {**rest, "input": items}
    encoded = encode_body(body)
    assert json.loads(encoded) == expanded(body)
    for item in items:
        if isinstance(item, RawItems):
            assert bytes(item.elements) in encoded


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"model": "é", "input": "a\ud800b"}, {"model": "é", "input": "a\ud800b"}),
        (
            {"input": [{"t": "\udfff é"}, RawItems('[{"a":"é"}]'.encode())], "k\udc00": 1},
            {"input": [{"t": "\udfff é"}, {"a": "é"}], "k\udc00": 1},
        ),
    ],
)
def test_a_lone_surrogate_goes_out_as_its_escape(
    body: dict[str, Any], expected: dict[str, Any]
) -> None:
    # Client bodies with one are refused when parsed; anything else that carries one must
    # still encode (UTF-8 cannot hold it raw), to the same JSON value.
    encoded = encode_body(body)
    assert json.loads(encoded) == expected
    assert "é".encode() in encoded  # only the surrogate is escaped


@given(
    input_parts,
    st.dictionaries(st.text().filter(lambda key: key != "input"), json_values, max_size=3),
)
def test_blocks_in_the_encoders_spelling_give_exactly_the_expanded_body(
    parts: list[tuple[str, Any]], rest: dict[str, Any]
) -> None:
    """Byte for byte: splicing raw elements (here spelled as orjson spells them) into the
    body's text is the text of the body with those items in place."""
    try:
        orjson.dumps([parts, rest])
    except orjson.JSONEncodeError:  # then the stdlib spells the rest: not orjson's bytes
        return
    items = [RawItems(orjson.dumps(value)) if kind == "raw" else value for kind, value in parts]
    body = {"input": items, **rest}
    assert encode_body(body) == encode_body(expanded(body))


def test_raw_items_keep_a_view_of_the_stored_bytes_between_the_brackets() -> None:
    stored = b' \n[ {"a":1},{"b":2}\t]\r'
    raw = RawItems(stored)
    assert bytes(raw.elements) == b'{"a":1},{"b":2}'
    assert raw.elements.obj is stored  # no copy


@given(
    st.one_of(
        st.none(),
        st.text(),
        input_parts,
    ),
    st.dictionaries(st.text().filter(lambda key: key != "input"), json_values, max_size=3),
    st.booleans(),
)
def test_the_piecewise_encoding_is_the_same_bytes(
    parts: list[tuple[str, Any]] | str | None, rest: dict[str, Any], input_first: bool
) -> None:
    """One json.dumps call per value (a large body, on a worker thread) spells the body
    exactly as one call for all does, key order and lone surrogates included."""
    body: dict[str, Any] = dict(rest)
    if parts is not None:
        items = parts if isinstance(parts, str) else [
            RawItems(json.dumps(value).encode()) if kind == "raw" else value
            for kind, value in parts
        ]  # fmt: skip
        body = {"input": items, **rest} if input_first else {**rest, "input": items}
    assert encode_body(body, piecewise=True) == encode_body(body)


@pytest.mark.parametrize(
    "body",
    [
        {"model": "é", "input": "a\ud800b"},
        {"input": [{"t": "\udfff é"}, RawItems('[{"a":"é"}]'.encode())], "k\udc00": 1},
        {"model": "m", "input": []},
        {},
    ],
)
def test_the_piecewise_encoding_of_edge_cases(body: dict[str, Any]) -> None:
    assert encode_body(body, piecewise=True) == encode_body(body)
