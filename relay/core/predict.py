"""Predict the assistant envelopes the client may send back for a completed response.

Input is what the client was actually sent (converted Chat output), not the upstream
items. A prediction is one envelope form, ``{"role": "assistant", "content": text,
"tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}]}``,
normalized like every history envelope: a string or text parts, ``null`` or ``""``
content, absent, ``null`` or empty ``tool_calls``, redundant ``index`` values and the null
fields an SDK adds (``refusal: null`` ...) all hash equal, so this one form stands for
each of them.

Clients send tool-call arguments back in one of two spellings, so a response has up to two
predicted envelopes (:func:`predict_envelopes`), each an exact derivation:

- *respelled*, as a JavaScript client re-serializes them (``JSON.stringify`` of
  ``JSON.parse``; Cursor does): compact, member order kept, the same escaping;
- *as sent*: exactly the string the client received (a script or SDK resending the
  message it got). It differs from the respelled one only when the model's arguments were
  not already in that form (``{"target": "a.py"}`` with its space).

Python reproduces the respelling exactly except where JavaScript would respell something
in a way Python cannot know for certain, so those cases give ``None`` (an unknown
prediction: non-admission or a position poison, never a guessed match), whatever the
as-sent spelling is: a client that respells would send something unpredicted.

- invalid JSON, ``NaN``/``Infinity``, nesting too deep to parse;
- integers beyond ±(2**53 - 1) and ``-0`` (JavaScript numbers lose or respell them);
- any float token with an exponent, a fractional part ending in ``0`` (``1.0``, ``2.50``,
  ``-0.0``) or a spelling that is not Python's shortest round trip (``0.00001``,
  ``0.1000000000000000055``): JavaScript could print those differently;
- duplicate keys, and array-index-like keys (``"0"``, ``"17"``), which JavaScript moves
  to the front of an object;
- lone surrogates in strings (JavaScript escapes them, Python cannot write them raw).

Everything else is written as JavaScript writes it: ``"``, ``\\\\``, ``\\b \\f \\n \\r \\t``
escaped, other code points below U+0020 as lowercase ``\\u00xx``, every other code point
raw (U+2028, U+2029 and U+007F too); escapes such as ``\\u00e9`` or ``\\/`` in the input
decoded; whitespace outside strings dropped.

A refusal also gives ``None``: Chat carries it in a separate ``refusal`` field, and how a
client echoes that back is not known.

A custom tool call (``kind == "custom"``: the upstream made a ``custom_tool_call``) is
predicted as the Chat API's own form, ``{"id", "type": "custom", "custom": {"name",
"input"}}``, with its input exactly as sent in both envelopes: the input is freeform text,
never JSON, and no client respells it. That one form stands for every way the relay sends
such a call and a client hands it back: a Chat-shaped client echoes the custom form it
got; a Responses-shaped history maps its ``custom_tool_call`` item, and a
``function_call`` item naming a tool the request declares ``custom`` (the function form
the relay may have sent, echoed back), to that same envelope (``responses_history``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from relay.core.envelope import normalize_assistant
from relay.errors import InternalSignal

_SAFE_INTEGER: Final = 2**53 - 1
_INDEX_KEY: Final = re.compile(r"(?:0|[1-9][0-9]*)\Z")


@dataclass(frozen=True)
class SentToolCall:
    """One tool call exactly as the client received it (``arguments``: a custom call's
    raw input). ``kind`` is ``"custom"`` for a custom tool call, in either form it was
    sent in, else ``"function"``."""

    id: str
    name: str
    arguments: str
    kind: str = "function"


class _Respelled(InternalSignal):
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


def predict_envelopes(
    text: str, tool_calls: Sequence[SentToolCall] = (), refusal: str | None = None
) -> tuple[dict[str, Any], ...] | None:
    """The normalized envelopes a client may send back, or ``None`` when they are unknown:
    the respelled one first, then the as-sent one when its arguments differ.

    ``text`` is the assistant content sent (all deltas joined); ``tool_calls`` the calls
    in the order sent. One client spells every call of a message one way, so there are
    two envelopes at most, never a mix of spellings.
    """
    if refusal is not None:
        return None
    respelled = []
    for call in tool_calls:
        if call.kind == "custom":
            respelled.append(call.arguments)  # freeform text: never respelled
            continue
        arguments = reserialize_arguments(call.arguments)
        if arguments is None:
            return None
        respelled.append(arguments)
    envelopes = [_envelope(text, tool_calls, respelled)]
    as_sent = [call.arguments for call in tool_calls]
    if as_sent != respelled:
        envelopes.append(_envelope(text, tool_calls, as_sent))
    return tuple(envelopes)


def predict_envelope(
    text: str, tool_calls: Sequence[SentToolCall] = (), refusal: str | None = None
) -> dict[str, Any] | None:
    """The respelled envelope of :func:`predict_envelopes` (a client that re-serializes
    the arguments), or ``None`` when the prediction is unknown."""
    envelopes = predict_envelopes(text, tool_calls, refusal)
    return None if envelopes is None else envelopes[0]


def _envelope(
    text: str, tool_calls: Sequence[SentToolCall], arguments: Sequence[str]
) -> dict[str, Any]:
    calls = [
        {"id": call.id, "type": "custom", "custom": {"name": call.name, "input": spelled}}
        if call.kind == "custom"
        else {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": spelled},
        }
        for call, spelled in zip(tool_calls, arguments, strict=True)
    ]
    return normalize_assistant({"role": "assistant", "content": text, "tool_calls": calls})
