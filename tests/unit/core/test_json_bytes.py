"""The upstream body's encoding: replayed blocks go out as their stored text, verbatim."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.core.json_bytes import RawItems, encode_body

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
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
def test_without_raw_items_it_is_json_dumps(body: dict[str, Any]) -> None:
    assert encode_body(body) == json.dumps(body, ensure_ascii=False).encode("utf-8")


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
def test_blocks_in_json_dumps_spelling_give_exactly_json_dumps_of_the_expanded_body(
    parts: list[tuple[str, Any]], rest: dict[str, Any]
) -> None:
    """Byte for byte: splicing raw elements (here spelled as json.dumps spells them) into
    the body's text is the text of the body with those items in place."""
    items = [
        RawItems(json.dumps(value, ensure_ascii=False).encode("utf-8", "backslashreplace"))
        if kind == "raw" else value
        for kind, value in parts
    ]  # fmt: skip
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
