"""The upstream request body as bytes, replayed output blocks spliced in as stored (pure).

A replayed block goes upstream as the exact JSON text the planner verified (its SHA-256
is the record's output hash), not parsed and encoded again: what was generated is what
is sent, byte for byte, and the largest part of a long conversation's body costs one
copy instead of a parse and an encode.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import orjson

_JSON_SPACE: Final = b" \t\n\r"  # the only whitespace JSON allows
_OPEN: Final = ord("[")
_CLOSE: Final = ord("]")
_COMPACT: Final = (",", ":")


class RawItems:
    """The items of one JSON array text (UTF-8 bytes), to be placed in an ``input`` list
    as they are."""

    __slots__ = ("elements",)

    def __init__(self, array_text: bytes) -> None:
        # A view of the stored bytes between the brackets: nothing is copied until the
        # body is joined (bytes are immutable, so the view cannot change under it).
        start, end = 0, len(array_text)
        while start < end and array_text[start] in _JSON_SPACE:
            start += 1
        while end > start and array_text[end - 1] in _JSON_SPACE:
            end -= 1
        inner_start, inner_end = start + 1, end - 1
        while inner_start < inner_end and array_text[inner_start] in _JSON_SPACE:
            inner_start += 1
        while inner_end > inner_start and array_text[inner_end - 1] in _JSON_SPACE:
            inner_end -= 1
        # The planner parsed it as a non-empty array; this only guards the splice.
        if not (
            end - start >= 2
            and array_text[start] == _OPEN
            and array_text[end - 1] == _CLOSE
            and inner_end > inner_start
        ):
            raise ValueError("RawItems needs the text of a non-empty JSON array")
        # the array's elements, comma separated, as stored
        self.elements = memoryview(array_text)[inner_start:inner_end]

    def __repr__(self) -> str:
        return f"RawItems(<{len(self.elements)} bytes>)"  # never the content


def encode_body(body: Mapping[str, Any], *, piecewise: bool = False) -> bytes:
    """``body`` as compact UTF-8 JSON (no whitespace between tokens); :class:`RawItems`
    in its ``input`` list become their elements, verbatim, and ``input`` then comes first.
    Everything else is spelled by orjson, or, when orjson refuses any of it (an integer
    beyond 64 bits, a lone surrogate, a key that is not a string), by
    ``json.dumps(..., ensure_ascii=False, separators=(",", ":"))`` (a lone surrogate
    escaped, see :func:`_utf8`). Either way the text parses to exactly the value
    ``json.dumps(body)`` spells (design §21): JSON ignores whitespace between
    tokens, and both write a float as the shortest text that reads back as the same
    double. The one difference: a non-finite float (not JSON: no parsed client body holds
    one) goes out as ``null`` where the stdlib writes ``NaN``/``Infinity``.

    Built as bytes and joined once: the replayed blocks (most of a long conversation's
    body) are copied once, never decoded, and never widened into a ``str`` of the widest
    character any block holds.

    ``piecewise``: the same bytes, from one encoder call per top-level value and per
    ``input`` item instead of one for all (each holds the GIL throughout), for a large
    body encoded on a worker thread."""
    if piecewise:
        return _piecewise(body)
    items = body.get("input")
    if not isinstance(items, list) or not any(type(item) is RawItems for item in items):
        return _encoded([body])[0]
    runs: list[list[Any] | RawItems] = []  # ordinary items between raw blocks: one call each
    for item in items:
        if type(item) is RawItems:
            runs.append(item)
        elif runs and type(runs[-1]) is list:
            runs[-1].append(item)
        else:
            runs.append([item])
    plain = [run for run in runs if type(run) is list]
    rest = {k: v for k, v in body.items() if k != "input"}
    *encoded_runs, encoded_rest = _encoded([*plain, rest])
    inner = iter(encoded_runs)
    pieces = [
        run.elements if type(run) is RawItems else memoryview(next(inner))[1:-1] for run in runs
    ]
    tail = b"," + encoded_rest[1:] if encoded_rest != b"{}" else b"}"
    return b"".join((b'{"input":[', b",".join(pieces), b"]", tail))


def _piecewise(body: Mapping[str, Any]) -> bytes:
    items = body.get("input")
    keys = list(body)
    if isinstance(items, list) and any(type(item) is RawItems for item in items):
        keys.remove("input")  # the splice puts it first (encode_body)
        keys.insert(0, "input")
    values: list[Any] = []  # the names and values to encode, in order
    for key in keys:
        value = body[key]
        values.append(key)
        if key == "input" and isinstance(value, list):
            values.extend(item for item in value if type(item) is not RawItems)
        else:
            values.append(value)
    encoded = iter(_encoded(values))
    members: list[bytes] = []
    for key in keys:
        name = next(encoded)
        value = body[key]
        if key == "input" and isinstance(value, list):
            elements = [
                item.elements if type(item) is RawItems else next(encoded) for item in value
            ]
            members.append(name + b":[" + b",".join(elements) + b"]")
        else:
            members.append(name + b":" + next(encoded))
    return b"{" + b",".join(members) + b"}"


def _encoded(values: list[Any]) -> list[bytes]:
    """Each value as compact JSON: all by orjson, or all by the stdlib when orjson refuses
    one (so that a body's spelling never depends on how it was cut into calls)."""
    try:
        return [orjson.dumps(value) for value in values]
    except orjson.JSONEncodeError:
        return [
            _utf8(json.dumps(value, ensure_ascii=False, separators=_COMPACT)) for value in values
        ]


def _utf8(text: str) -> bytes:
    """``text`` as UTF-8. A lone surrogate (UTF-8 cannot encode one) goes out as its JSON
    escape: in JSON text it can only stand inside a string, where ``\\udXXX`` means the
    same thing. Client bodies holding one are refused when parsed (``relay.http.request_body``);
    this keeps any other path from failing with a 500."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace")
