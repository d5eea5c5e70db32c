"""The client body's decoding: every failure is a 400 that names what is wrong and where."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.errors import InvalidRequest, UnsupportedMediaType
from relay.http.request_body import _fast_loads, check_content_encoding, parse_json_object

DIGIT_LIMIT = sys.get_int_max_str_digits()


def rejected(raw: bytes | str) -> InvalidRequest:
    data = raw.encode() if isinstance(raw, str) else raw
    with pytest.raises(InvalidRequest) as caught:
        parse_json_object(data, "application/json")
    err = caught.value
    assert err.status == 400
    json.dumps(err.envelope()).encode("utf-8")  # the answer itself is always encodable
    return err


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b"", "empty"),
        (b"  \n", "empty"),
        (b"\xff{}", "UTF-8"),
        (b'{"a": "\xc3"}', "bad byte at offset 7"),  # a JSON object, but not UTF-8
        (b"\x0b\x0c\t\r", "empty"),
        (b"{not json", "not valid JSON"),
        (b"[1]", "JSON object, not a JSON array"),
        (b"null", "not a JSON null"),
        (b'{"a": NaN}', "NaN is not a JSON number"),
        (b'{"a": -Infinity}', "-Infinity is not a JSON number"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
)
def test_malformed_bodies(raw: bytes, needle: str) -> None:
    assert needle in rejected(raw).message


def test_content_type() -> None:
    with pytest.raises(UnsupportedMediaType):
        parse_json_object(b"{}", "text/plain")
    assert parse_json_object(b"{}", "application/vnd.api+json; charset=utf-8") == {}
    assert parse_json_object(b"{}", None) == {}


@pytest.mark.parametrize("declared", [None, "", "identity", "IDENTITY", " identity ", "identity,"])
def test_an_uncompressed_body_is_accepted(declared: str | None) -> None:
    check_content_encoding(declared)


@pytest.mark.parametrize(
    ("declared", "named"),
    [
        ("gzip", "'gzip'"),
        ("GZip", "'gzip'"),
        ("deflate", "'deflate'"),
        ("br", "'br'"),
        ("x-gzip", "'x-gzip'"),
        ("identity, gzip", "'gzip'"),  # what Tornado joins repeated headers into
        ("zstd,identity", "'zstd'"),
        ("a" * 100, "'" + "a" * 37 + "...'"),
    ],
)
def test_a_compressed_body_is_415_naming_the_coding(declared: str, named: str) -> None:
    with pytest.raises(UnsupportedMediaType) as caught:
        check_content_encoding(declared)
    err = caught.value
    assert (err.status, err.code) == (415, "unsupported_content_encoding")
    assert f"Content-Encoding {named} is not supported" in err.message
    assert "uncompressed" in err.message


# --- lone surrogates -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "param", "escape"),
    [
        (
            '{"messages": [{"role": "user", "content": "\\ud800"}]}',
            "messages[0].content",
            "\\ud800",
        ),
        ('{"input": "a\\udfffb"}', "input", "\\udfff"),
        ('{"m": [[], ["x", "\\uDBFF"]]}', "m[1][1]", "\\udbff"),
        ('{"m": "\\ud83d\\ud83d\\ude00"}', "m", "\\ud83d"),  # a high half, then a pair
        ('{"m": "\\ude00\\ud83d"}', "m", "\\ude00"),  # the halves in the wrong order
        ('{"m": "\\\\ud800\\udc00"}', "m", "\\udc00"),  # a literal backslash, then a low half
        ('{"metadata": {"\\ud800": "v"}}', "metadata", "\\ud800"),  # a key
        ('{"\\udc00": 1}', None, "\\udc00"),  # a top-level key
        ('{"tools": {"a b": {"c-d": "\\ud800"}}}', 'tools["a b"]["c-d"]', "\\ud800"),
    ],
)
def test_a_lone_surrogate_is_a_400_naming_the_field(
    raw: str, param: str | None, escape: str
) -> None:
    err = rejected(raw)
    assert err.param == param
    assert "lone UTF-16 surrogate" in err.message
    assert escape in err.message
    if param is not None:
        assert err.message.startswith(param) or f"a key in {param}" in err.message


@pytest.mark.parametrize(
    "raw",
    [
        '{"m": "\\ud83d\\ude00"}',  # a pair: one character
        '{"m": "\\uD83D\\uDE00 and \\u00e9"}',
        '{"m": "\\\\ud800"}',  # a literal backslash followed by text
        '{"m": "\U0001f600 raw UTF-8"}',
    ],
)
def test_surrogate_pairs_and_look_alikes_are_accepted(raw: str) -> None:
    assert parse_json_object(raw.encode(), None) == json.loads(raw)


def test_a_lone_surrogate_at_the_parsers_depth_limit_is_still_named() -> None:
    depth = 900  # as deep as json.loads goes from here; the walk must not recurse
    raw = '{"a": ' + "[" * depth + '"\\ud800"' + "]" * depth + "}"
    err = rejected(raw)
    assert err.param == "a" + "[0]" * depth


# --- numbers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "param", "needle"),
    [
        (
            '{"max_tokens": ' + "9" * (DIGIT_LIMIT + 1) + "}",
            "max_tokens",
            f"{DIGIT_LIMIT + 1} digits",
        ),
        ('{"a": [1, {"b": -' + "1" * 5000 + "}]}", "a[1].b", "5000 digits"),
        ('{"temperature": 1e400}', "temperature", "1e400 is beyond the range of a double"),
        ('{"t": [0.5, -1E+999]}', "t[1]", "-1E+999"),
        ('{"t": 1' + "0" * 400 + ".0}", "t", "beyond the range"),
    ],
)
def test_an_unrepresentable_number_is_a_400_naming_it(raw: str, param: str, needle: str) -> None:
    err = rejected(raw)
    assert err.param == param
    assert "cannot represent" in err.message
    assert needle in err.message


def test_the_largest_numbers_that_fit_are_kept() -> None:
    big = int("9" * DIGIT_LIMIT)
    raw = json.dumps({"n": big, "f": 1.7976931348623157e308, "g": -5e-324}).encode()
    assert parse_json_object(raw, None) == {"n": big, "f": 1.7976931348623157e308, "g": -5e-324}


def test_a_bad_number_replaced_by_a_duplicate_key_is_gone() -> None:
    # json.loads keeps the last value of a repeated key; the bad one never reaches anything.
    assert parse_json_object(b'{"a": 1e999, "a": 2}', None) == {"a": 2}


def test_a_syntax_error_after_a_bad_number_is_reported_as_such() -> None:
    assert "not valid JSON" in rejected('{"a": 1e999, "b": }').message


# --- properties ------------------------------------------------------------------------

keys = st.text(max_size=6)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=20,
)
bodies = st.dictionaries(keys, json_values, max_size=5)


@given(bodies, st.booleans())
def test_valid_bodies_parse_to_what_was_sent(body: dict[str, Any], ascii_only: bool) -> None:
    # ensure_ascii=True is what most SDKs send: every non-ASCII character escaped, and
    # characters outside the BMP as surrogate pairs.
    assert parse_json_object(json.dumps(body, ensure_ascii=ascii_only).encode(), None) == body


def json_path(steps: list[str | int]) -> str:
    """The path notation the errors use: a.b[0]["not an identifier"]."""
    out = ""
    for step in steps:
        if isinstance(step, int):
            out += f"[{step}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", step):
            out += f".{step}" if out else step
        else:
            out += f"[{json.dumps(step)}]"
    return out


@st.composite
def body_with_a_lone_surrogate(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """A body and the path of the one string in it that holds a lone surrogate."""
    body = draw(bodies)
    node: Any = body
    steps: list[str | int] = []
    while True:
        if isinstance(node, list):
            key: str | int = draw(st.integers(0, len(node)))
            if key == len(node):
                node.append(None)
        else:
            key = draw(st.sampled_from(sorted(node)) if node and draw(st.booleans()) else keys)
            node.setdefault(key, None)
        steps.append(key)
        if not isinstance(node[key], dict | list) or draw(st.booleans()):
            break
        node = node[key]
    surrogate = chr(draw(st.integers(0xD800, 0xDFFF)))
    node[key] = draw(st.text(max_size=3)) + surrogate + draw(st.text(max_size=3))
    return body, json_path(steps)


@given(body_with_a_lone_surrogate())
def test_a_lone_surrogate_anywhere_is_named_by_its_path(case: tuple[dict[str, Any], str]) -> None:
    body, path = case
    # ASCII: the only way to send a lone surrogate (UTF-8 cannot encode one) is its escape.
    assert rejected(json.dumps(body)).param == path


# --- the piecewise parse (large bodies, on a worker thread) --------------------------


def outcome(raw: bytes, *, piecewise: bool) -> object:
    try:
        return ("ok", parse_json_object(raw, None, piecewise=piecewise))
    except InvalidRequest as err:
        return ("error", err.message, err.param)


JSON_NOISE = st.sampled_from(
    ["", "{", "}", "[", "]", ",", ":", '"', "\\", " ", "\n", "1e999", "NaN", "-", "\ufeff",
     "\x00", "tru", "[]", "{}", '"\\ud800"', "9" * 5000]
)  # fmt: skip


@st.composite
def json_texts(draw: st.DrawFn) -> bytes:
    """A JSON body, often nested as deep as a chat body, often broken somewhere."""
    value = draw(json_values)
    if draw(st.booleans()):
        value = {"model": "m", "messages": [{"role": "user", "content": [value]}]}
    text = json.dumps(
        value, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 1]))
    )
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 2))
        text = text[:at] + draw(JSON_NOISE) + text[at + cut :]
    return text.encode("utf-8", "surrogatepass")


@given(json_texts())
def test_the_piecewise_parse_gives_the_same_value_or_the_same_error(raw: bytes) -> None:
    assert outcome(raw, piecewise=True) == outcome(raw, piecewise=False)


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        b"\xef\xbb\xbf{}",  # a UTF-8 BOM
        b" {} x",
        b"{} ",
        b"",
        b"[1,]",
        b'{"a": 1,}',
        b'{"a" 1}',
        b'{"messages": [{"role": "user", "content": [{"n": 1e400}]}]}',
        b'{"n": ' + b"9" * 5000 + b"}",
    ],
)
def test_the_piecewise_parse_on_edge_cases(raw: bytes) -> None:
    assert outcome(raw, piecewise=True) == outcome(raw, piecewise=False)


# --- the fast parse (orjson, for a body not parsed piecewise) --------------------------


@given(json_texts())
def test_the_fast_parse_gives_the_stdlibs_value_type_for_type_or_its_error(raw: bytes) -> None:
    # The piecewise parse is the stdlib's; repr tells 1 from 1.0 and 0 from -0.0, which
    # == does not.
    assert repr(outcome(raw, piecewise=False)) == repr(outcome(raw, piecewise=True))


@pytest.mark.parametrize(
    "raw",
    [
        b'{"n": 9223372036854775807, "m": -9223372036854775808}',  # 19 digits: the stdlib's
        b'{"n": 18446744073709551616, "m": -18446744073709551617}',  # beyond 64 bits
        b'{"f": 0.1000000000000000055511151231257827, "g": 123456789012345678e-30}',
        b'{"f": 2.2250738585072011e-308, "g": 4.9406564584124654e-324, "h": 1e-400}',
        b'{"a": 1, "b": 2, "a": 3}',
        b'{"a": -0, "b": -0.0, "c": 1E5, "d": 1e+2, "e": 0.5e-3}',
        b'{"t": "\\ud83d\\ude00 \\u00e9", "u": "\\udc00"}',
        b'{"deep": ' + b"[" * 1100 + b"]" * 1100 + b"}",
    ],
)
def test_the_fast_parse_on_edge_cases(raw: bytes) -> None:
    assert repr(outcome(raw, piecewise=False)) == repr(outcome(raw, piecewise=True))


def test_the_fast_parse_leaves_a_run_of_19_digits_to_the_stdlib() -> None:
    assert _fast_loads(b'{"n": 123456789012345678}') == {"n": 123456789012345678}
    assert _fast_loads(b'{"n": 1234567890123456789}') is None
    assert _fast_loads(b'{"s": "id 1234567890123456789"}') is None  # anywhere
    assert _fast_loads(b'{"n": 1e999}') is None  # refused: the stdlib names it


@given(st.integers(0, 10**18 - 1), st.integers(-345, 310), st.integers(0, 17))
def test_the_fast_parse_rounds_any_float_literal_as_float_does(
    digits: int, exponent: int, point: int
) -> None:
    text = str(digits)
    point = min(point, len(text) - 1)
    literal = f"{text[: len(text) - point]}.{text[len(text) - point :]}" if point else text
    raw = f'{{"f": {literal}e{exponent}, "g": -{literal}}}'.encode()
    assert repr(outcome(raw, piecewise=False)) == repr(outcome(raw, piecewise=True))
