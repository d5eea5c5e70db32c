"""The spellings a client may send tool-call arguments back in (relay.core.predict).

Two are predicted, each an exact derivation: the arguments as sent, and the respelling a
JavaScript client makes, ``JSON.stringify(JSON.parse(arguments))``. The respelling is
checked against node itself when node is installed (one node process for the module,
fed one text a line); where JavaScript and Python could differ it must refuse (``None``),
never guess.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.core.predict import (
    SentToolCall,
    predict_envelope,
    predict_envelopes,
    reserialize_arguments,
)
from tests.support.json_values import json_values

# JSON.stringify(JSON.parse(text)) for each line (a JSON string); null when parse throws.
NODE_RESPELL = r"""
const rl = require("readline").createInterface({ input: process.stdin });
rl.on("line", (line) => {
  let out = null;
  try { out = JSON.stringify(JSON.parse(JSON.parse(line))); } catch (e) { out = null; }
  process.stdout.write(JSON.stringify(out) + "\n");
});
"""


class Node:
    """One node process answering respellings over a pipe."""

    def __init__(self, executable: str) -> None:
        self._process = subprocess.Popen(
            [executable, "-e", NODE_RESPELL], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )

    def respell(self, text: str) -> str | None:
        assert self._process.stdin is not None and self._process.stdout is not None
        # ensure_ascii: lone surrogates and line separators travel as escapes.
        self._process.stdin.write(json.dumps(text).encode("ascii") + b"\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        assert line, "node exited"
        answer: str | None = json.loads(line)
        return answer

    def close(self) -> None:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.close()
        self._process.wait(timeout=10)
        self._process.stdout.close()


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    executable = shutil.which("node")
    if executable is None:
        pytest.skip("node is not installed: the respelling is checked against Python only")
    process = Node(executable)
    yield process
    process.close()


# --- tables ---------------------------------------------------------------------------------

# (arguments as sent, what JSON.stringify(JSON.parse(...)) gives)
RESPELLED = [
    ('{"target": "a.py"}', '{"target":"a.py"}'),
    ('{"target":"a.py"}', '{"target":"a.py"}'),
    ('{ "a" : [ 1 , 2.5 , true , false , null ] }\n', '{"a":[1,2.5,true,false,null]}'),
    ('\t{"nested": {"b": [], "a": {}}}\r\n', '{"nested":{"b":[],"a":{}}}'),
    ('{"s": "\\u00e9\\/\\u0041"}', '{"s":"\u00e9/A"}'),
    ('{"s": "\\u2028\\u2029\u2028\x7f"}', '{"s":"\u2028\u2029\u2028\x7f"}'),
    ('{"s": "\\u0001\\u001F\\u0008\\u000C\\u000a"}', '{"s":"\\u0001\\u001f\\b\\f\\n"}'),
    ('{"s": "\\b\\f\\n\\r\\t\\"\\\\"}', '{"s":"\\b\\f\\n\\r\\t\\"\\\\"}'),
    ('{"s": "\\ud83d\\ude00 \U0001f600"}', '{"s":"\U0001f600 \U0001f600"}'),
    ('{"n": 9007199254740991, "m": -9007199254740991, "z": 0}', '{"n":9007199254740991,"m":-9007199254740991,"z":0}'),
    ('{"f": 0.5, "g": -1.25, "h": 0.1, "i": 123456.789}', '{"f":0.5,"g":-1.25,"h":0.1,"i":123456.789}'),
    ('{"__proto__": 1, "constructor": 2}', '{"__proto__":1,"constructor":2}'),
    ('{"b": 1, "a": 2, "-1": 3, "01": 4, "1.5": 5}', '{"b":1,"a":2,"-1":3,"01":4,"1.5":5}'),
    ('[1, "two", {"three": 3}]', '[1,"two",{"three":3}]'),
    ('"just a string"', '"just a string"'),
    (" 42 ", "42"),
]  # fmt: skip

# Arguments whose respelling Python cannot be sure of (or JavaScript cannot parse).
REFUSED = [
    ('{"a": 1.0}', "a float JavaScript prints as an integer"),
    ('{"a": 2.50}', "a trailing zero"),
    ('{"a": 1e5}', "an exponent"),
    ('{"a": 1E-7}', "an exponent"),
    ('{"a": 0.00001}', "not Python's shortest spelling (1e-05)"),
    ('{"a": 0.1000000000000000055}', "not the shortest round trip"),
    ('{"a": -0}', "negative zero"),
    ('{"a": -0.0}', "negative zero"),
    ('{"a": 9007199254740992}', "beyond the safe integers"),
    ('{"a": 12345678901234567890}', "beyond the safe integers"),
    ('{"a": 1, "a": 2}', "a duplicate key"),
    ('{"b": 1, "1": 2}', "an array-index key JavaScript moves first"),
    ('{"4294967295": 1}', "an index-like key (conservatively)"),
    ('{"s": "\\ud800"}', "a lone surrogate JavaScript escapes"),
    ('{"s": "\ud800"}', "a raw lone surrogate"),
    ('{"a": NaN}', "not JSON"),
    ('{"a": Infinity}', "not JSON"),
    ("", "not JSON"),
    ('{"a": 1', "not JSON"),
    ('{"a": 1} x', "not JSON"),
    ('\ufeff{"a": 1}', "a byte-order mark is not JSON whitespace"),
    ("[" * 2000 + "]" * 2000, "too deep for Python to parse"),
]


@pytest.mark.parametrize(("sent", "expected"), RESPELLED)
def test_respelling_is_what_javascript_writes(sent: str, expected: str) -> None:
    assert reserialize_arguments(sent) == expected
    assert reserialize_arguments(expected) == expected  # a fixed point


@pytest.mark.parametrize(("sent", "expected"), RESPELLED)
def test_the_respelling_table_is_node_s(node: Node, sent: str, expected: str) -> None:
    assert node.respell(sent) == expected


@pytest.mark.parametrize(("sent", "why"), REFUSED, ids=[why for _, why in REFUSED])
def test_a_respelling_python_cannot_be_sure_of_is_refused(sent: str, why: str) -> None:
    assert reserialize_arguments(sent) is None


# --- envelopes ------------------------------------------------------------------------------


def envelope(text: str, *arguments: str) -> dict[str, Any]:
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": "read", "arguments": a}}
        for i, a in enumerate(arguments)
    ]
    return {"role": "assistant", "content": text, "tool_calls": calls}


def sent(*arguments: str) -> tuple[SentToolCall, ...]:
    return tuple(SentToolCall(f"call_{i}", "read", a) for i, a in enumerate(arguments))


def test_compact_arguments_have_one_spelling() -> None:
    assert predict_envelopes("", sent('{"a":1}', "{}")) == (envelope("", '{"a":1}', "{}"),)
    assert predict_envelopes("hi") == (envelope("hi"),)


def test_other_arguments_have_two_respelled_first() -> None:
    calls = sent('{"a": 1}', "{}", '{"b":\n2}')
    assert predict_envelopes("x", calls) == (
        envelope("x", '{"a":1}', "{}", '{"b":2}'),
        envelope("x", '{"a": 1}', "{}", '{"b":\n2}'),  # as sent: every call as sent
    )
    assert predict_envelope("x", calls) == envelope("x", '{"a":1}', "{}", '{"b":2}')


def test_one_unsure_respelling_makes_the_prediction_unknown() -> None:
    # The as-sent spelling is known, but a client that respells would send something
    # unpredicted: the whole prediction is unknown (a poison), as before.
    assert predict_envelopes("", sent('{"a": 1}', '{"b": 1.0}')) is None
    assert predict_envelopes("x", refusal="no") is None


# --- properties -----------------------------------------------------------------------------
# A JSON value is drawn as a tree whose number tokens are fixed; each tree is then spelled
# in random ways (whitespace, which characters are escaped and how).

SPECIAL_CHARS = [
    '"', "\\", "/", "\b", "\f", "\n", "\r", "\t", "\x00", "\x1f", "\x7f", "\u00e9",
    "\u2028", "\u2029", "\ufeff", "\ud800", "\udfff", "\U0001f600", "a", " ",
]  # fmt: skip
NUMBER_TOKENS = [
    "0", "-0", "1", "-1", "10", "1.0", "1.5", "-2.25", "0.1", "0.10", "1e5", "1E+5", "2e-3",
    "0.00001", "1e-05", "100.5", "9007199254740991", "9007199254740992",
    "-9007199254740993", "123456789012345678901234567890", "5e-324",
    "1.7976931348623157e308", "0.30000000000000004", "1234567890123456.8",
]  # fmt: skip
KEYS = ["a", "b", "0", "17", "01", "-1", "4294967295", "__proto__", "\u00e9", "a b"]

strings = st.lists(st.sampled_from(SPECIAL_CHARS) | st.characters(), max_size=8).map("".join)
numbers = (
    st.sampled_from(NUMBER_TOKENS)
    | st.integers(-(2**60), 2**60).map(str)
    | st.floats(allow_nan=False, allow_infinity=False).map(repr)
)
leaves = (
    st.tuples(st.just("num"), numbers)
    | st.tuples(st.just("lit"), st.sampled_from(["true", "false", "null"]))
    | st.tuples(st.just("str"), strings)
)
trees = st.recursive(
    leaves,
    lambda inner: (
        st.tuples(st.just("arr"), st.lists(inner, max_size=4))
        | st.tuples(
            st.just("obj"), st.lists(st.tuples(st.sampled_from(KEYS) | strings, inner), max_size=4)
        )
    ),
    max_leaves=10,
)


def spell_string(text: str, rng: random.Random) -> str:
    out = ['"']
    for char in text:
        code = ord(char)
        short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n",
                 "\r": "\\r", "\t": "\\t", "/": "\\/"}.get(char)  # fmt: skip
        must = char in '"\\' or code < 0x20
        if not must and rng.random() < 0.6:
            out.append(char)
        elif short is not None and rng.random() < 0.5:
            out.append(short)
        elif code > 0xFFFF:
            high, low = divmod(code - 0x10000, 0x400)
            out.append(f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04X}")
        else:
            out.append(f"\\u{code:04x}" if rng.random() < 0.5 else f"\\u{code:04X}")
    out.append('"')
    return "".join(out)


def spell(tree: Any, rng: random.Random) -> str:
    def space() -> str:
        return rng.choice(["", "", " ", "\n", "\t", "\r\n  "])

    kind, value = tree
    if kind in ("num", "lit"):
        return str(value)
    if kind == "str":
        return spell_string(value, rng)
    if kind == "arr":
        inner = ",".join(space() + spell(item, rng) + space() for item in value)
        return "[" + inner + space() + "]"
    members = ",".join(
        space() + spell_string(key, rng) + space() + ":" + space() + spell(item, rng) + space()
        for key, item in value
    )
    return "{" + members + space() + "}"


@given(trees, st.randoms(use_true_random=False), st.randoms(use_true_random=False))
@settings(max_examples=200)
def test_respelling_depends_on_the_value_only_and_keeps_it(
    tree: Any, first: random.Random, second: random.Random
) -> None:
    one, other = spell(tree, first), spell(tree, second)
    respelled = reserialize_arguments(one)
    assert reserialize_arguments(other) == respelled  # any spelling of the same value
    if respelled is None:
        return
    assert json.loads(respelled) == json.loads(one)
    assert reserialize_arguments(respelled) == respelled
    assert respelled == json.dumps(json.loads(respelled), ensure_ascii=False, separators=(",", ":"))


@given(trees, st.randoms(use_true_random=False))
@settings(max_examples=200, deadline=None)
def test_respelling_is_javascript_s_or_refused(node: Node, tree: Any, rng: random.Random) -> None:
    text = spell(tree, rng)
    respelled = reserialize_arguments(text)
    if respelled is not None:  # and so never where JavaScript writes something else
        assert respelled == node.respell(text), text


# --- the envelope and the compact spelling -----------------------------------------------------


def test_prediction_reserializes_arguments_compactly() -> None:
    envelope = predict_envelope(
        "", [SentToolCall("c", "f", ' { "b" : [1, 2],\n "a": "\u00e9\\n" } ')]
    )
    assert envelope is not None
    assert envelope["tool_calls"][0]["function"]["arguments"] == '{"b":[1,2],"a":"\u00e9\\n"}'


@pytest.mark.parametrize(
    "arguments",
    [
        '{"n":9007199254740992}',  # 2**53: beyond the safe integers
        '{"n":-9007199254740992}',
        '{"n":12345678901234567890}',
        '{"n":1.0}',
        '{"n":2.50}',
        '{"n":1e5}',
        '{"n":1E-7}',
        '{"n":1.5e3}',
        '{"n":-0}',
        '{"n":-0.0}',
        '{"n":0.00001}',  # Python and JavaScript print it differently
        '{"n":0.1000000000000000055511151231257827}',
        '{"n":NaN}',
        '{"n":Infinity}',
        '{"a":1,"a":2}',
        '{"b":1,"1":2}',  # JavaScript moves index-like keys first
        '{"s":"\\ud800"}',
        "not json",
        "",
        '{"a":1} trailing',
        "[" * 100_000 + "]" * 100_000,
    ],
)
def test_prediction_rejects_arguments_the_client_may_respell(arguments: str) -> None:
    assert reserialize_arguments(arguments) is None
    assert predict_envelope("text", [SentToolCall("c", "f", arguments)]) is None


@pytest.mark.parametrize(
    "arguments",
    ['{"n":9007199254740991}', '{"n":-9007199254740991}', '{"n":0}', '{"n":-1.5}', '{"n":123.456}',
     '{"n":0.0001}', "[]", '"text"', "42", '{"key10":1,"01":2,"-1":3}'],
)  # fmt: skip
def test_prediction_keeps_safe_spellings(arguments: str) -> None:
    assert reserialize_arguments(arguments) == arguments


def test_a_refusal_is_an_unknown_prediction() -> None:
    assert predict_envelope("", [], refusal="I can't help with that.") is None


@given(json_values)
def test_reserialized_arguments_are_a_fixed_point(value: Any) -> None:
    arguments = json.dumps(value, ensure_ascii=False)
    once = reserialize_arguments(arguments)
    if once is not None:
        assert json.loads(once) == json.loads(arguments)
        assert reserialize_arguments(once) == once
