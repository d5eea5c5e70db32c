"""The upstream request body as bytes, replayed output blocks spliced in as stored (pure).

A replayed block goes upstream as the exact JSON text the planner verified (its SHA-256
is the record's output hash), not parsed and encoded again: what was generated is what
is sent, byte for byte, and the largest part of a long conversation's body costs one
copy instead of a parse and an encode.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


class RawItems:
    """The items of one JSON array text, to be placed in an ``input`` list as they are."""

    __slots__ = ("elements",)

    def __init__(self, array_text: str) -> None:
        text = array_text.strip()
        inner = text[1:-1].strip()
        # The planner parsed it as a non-empty array; this only guards the splice.
        if not (text.startswith("[") and text.endswith("]") and inner):
            raise ValueError("RawItems needs the text of a non-empty JSON array")
        self.elements = inner  # the array's elements, comma separated, as stored

    def __repr__(self) -> str:
        return f"RawItems(<{len(self.elements)} characters>)"  # never the content


def encode_body(body: Mapping[str, Any]) -> bytes:
    """``body`` as UTF-8 JSON; :class:`RawItems` in its ``input`` list become their
    elements, verbatim. Without any, exactly ``json.dumps(body, ensure_ascii=False)``
    (a lone surrogate escaped, see :func:`_utf8`)."""
    items = body.get("input")
    if not isinstance(items, list) or not any(type(item) is RawItems for item in items):
        return _utf8(json.dumps(body, ensure_ascii=False))
    pieces: list[str] = []
    run: list[Any] = []  # ordinary items since the last raw block: encoded in one call
    for item in items:
        if type(item) is RawItems:
            if run:
                pieces.append(json.dumps(run, ensure_ascii=False)[1:-1])
                run = []
            pieces.append(item.elements)
        else:
            run.append(item)
    if run:
        pieces.append(json.dumps(run, ensure_ascii=False)[1:-1])
    rest = json.dumps({k: v for k, v in body.items() if k != "input"}, ensure_ascii=False)
    tail = ", " + rest[1:] if rest != "{}" else "}"
    return _utf8('{"input": [' + ", ".join(pieces) + "]" + tail)


def _utf8(text: str) -> bytes:
    """``text`` as UTF-8. A lone surrogate (UTF-8 cannot encode one) goes out as its JSON
    escape: in JSON text it can only stand inside a string, where ``\\udXXX`` means the
    same thing. Client bodies holding one are refused when parsed (``relay.request_body``);
    this keeps any other path from failing with a 500."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace")
