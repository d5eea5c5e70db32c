"""Predict the assistant envelope the client will send back for a completed response.

Input is what the client was actually sent (converted Chat output), not the upstream
items. The prediction is one envelope form, ``{"role": "assistant", "content": text,
"tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}]}``,
normalized like every history envelope: a string or text parts, ``null`` or ``""``
content, absent or empty ``tool_calls`` and redundant ``index`` values all hash equal, so
this one form stands for each of them.

Tool-call arguments are predicted as the client re-serializes them (``JSON.stringify``
of ``JSON.parse``): compact, member order kept, same escaping. Python reproduces that
exactly except where JavaScript would respell something, so those cases give ``None``
(an unknown prediction: non-admission or a position poison, never a guessed match):

- invalid JSON, ``NaN``/``Infinity``, nesting too deep to parse;
- integers beyond ±(2**53 - 1) and ``-0`` (JavaScript numbers lose or respell them);
- any float token with an exponent, a fractional part ending in ``0`` (``1.0``, ``2.50``,
  ``-0.0``) or a spelling that is not Python's shortest round trip (``0.00001``,
  ``0.1000000000000000055``): JavaScript could print those differently;
- duplicate keys, and array-index-like keys (``"0"``, ``"17"``), which JavaScript moves
  to the front of an object;
- lone surrogates in strings (JavaScript escapes them, Python cannot write them raw).

A refusal also gives ``None``: Chat carries it in a separate ``refusal`` field, and how a
client echoes that back is not known.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from relay.reasoning.envelope import normalize_assistant

_SAFE_INTEGER: Final = 2**53 - 1
_INDEX_KEY: Final = re.compile(r"(?:0|[1-9][0-9]*)\Z")


@dataclass(frozen=True)
class SentToolCall:
    """One tool call exactly as the client received it."""

    id: str
    name: str
    arguments: str


class _Respelled(Exception):
    """The client could write this value back differently."""


def _parse_int(token: str) -> int:
    value = int(token)
    if token.startswith("-0") or abs(value) > _SAFE_INTEGER:
        raise _Respelled
    return value


def _parse_float(token: str) -> float:
    value = float(token)
    if "e" in token or "E" in token or token.endswith("0") or float.__repr__(value) != token:
        raise _Respelled
    return value


def _parse_constant(token: str) -> Any:
    raise _Respelled


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs) or any(_INDEX_KEY.match(key) for key in result):
        raise _Respelled
    return result


_DECODER: Final = json.JSONDecoder(
    parse_float=_parse_float,
    parse_int=_parse_int,
    parse_constant=_parse_constant,
    object_pairs_hook=_object,
)


def reserialize_arguments(arguments: str) -> str | None:
    """The arguments string the client will send back, or ``None`` when unknown."""
    try:
        value = _DECODER.decode(arguments)
    except (_Respelled, ValueError, RecursionError):
        return None
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return None  # a lone surrogate
    return text


def predict_envelope(
    text: str, tool_calls: Sequence[SentToolCall] = (), refusal: str | None = None
) -> dict[str, Any] | None:
    """The normalized envelope a client will send back, or ``None`` when it is unknown.

    ``text`` is the assistant content sent (all deltas joined); ``tool_calls`` the calls
    in the order sent.
    """
    if refusal is not None:
        return None
    calls = []
    for call in tool_calls:
        arguments = reserialize_arguments(call.arguments)
        if arguments is None:
            return None
        calls.append(
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": arguments},
            }
        )
    return normalize_assistant({"role": "assistant", "content": text, "tool_calls": calls})
