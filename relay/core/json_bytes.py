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

_JSON_SPACE: Final = b" \t\n\r"  # the only whitespace JSON allows
_OPEN: Final = ord("[")
_CLOSE: Final = ord("]")


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
    """``body`` as UTF-8 JSON; :class:`RawItems` in its ``input`` list become their
    elements, verbatim. Without any, exactly ``json.dumps(body, ensure_ascii=False)``
    (a lone surrogate escaped, see :func:`_utf8`); with some, the same text as if their
    elements had been spliced into that text's ``input`` array first.

    Built as bytes and joined once: the replayed blocks (most of a long conversation's
    body) are copied once, never decoded, and never widened into a ``str`` of the widest
    character any block holds.

    ``piecewise``: the same bytes, from one ``json.dumps`` call per top-level value and
    per ``input`` item instead of one for all (each holds the GIL throughout), for a
    large body encoded on a worker thread."""
    if piecewise:
        return _piecewise(body)
    items = body.get("input")
    if not isinstance(items, list) or not any(type(item) is RawItems for item in items):
        return _utf8(json.dumps(body, ensure_ascii=False))
    pieces: list[bytes | memoryview] = []
    run: list[Any] = []  # ordinary items since the last raw block: encoded in one call
    for item in items:
        if type(item) is RawItems:
            if run:
                pieces.append(_inner(run))
                run = []
            pieces.append(item.elements)
        else:
            run.append(item)
    if run:
        pieces.append(_inner(run))
    rest = _utf8(json.dumps({k: v for k, v in body.items() if k != "input"}, ensure_ascii=False))
    tail = b", " + rest[1:] if rest != b"{}" else b"}"
    return b"".join((b'{"input": [', b", ".join(pieces), b"]", tail))


def _piecewise(body: Mapping[str, Any]) -> bytes:
    items = body.get("input")
    keys = list(body)
    if isinstance(items, list) and any(type(item) is RawItems for item in items):
        keys.remove("input")  # the splice puts it first (encode_body)
        keys.insert(0, "input")
    members: list[bytes] = []
    for key in keys:
        value = body[key]
        name = json.dumps(key, ensure_ascii=False)
        if key == "input" and isinstance(value, list):
            encoded = [
                item.elements
                if type(item) is RawItems
                else _utf8(json.dumps(item, ensure_ascii=False))
                for item in value
            ]
            members.append(_utf8(name) + b": [" + b", ".join(encoded) + b"]")
        else:
            members.append(_utf8(f"{name}: {json.dumps(value, ensure_ascii=False)}"))
    return b"{" + b", ".join(members) + b"}"


def _inner(run: list[Any]) -> memoryview:
    """The encoded elements of a list of items, without its brackets (a view, no copy)."""
    return memoryview(_utf8(json.dumps(run, ensure_ascii=False)))[1:-1]


def _utf8(text: str) -> bytes:
    """``text`` as UTF-8. A lone surrogate (UTF-8 cannot encode one) goes out as its JSON
    escape: in JSON text it can only stand inside a string, where ``\\udXXX`` means the
    same thing. Client bodies holding one are refused when parsed (``relay.http.request_body``);
    this keeps any other path from failing with a 500."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace")
