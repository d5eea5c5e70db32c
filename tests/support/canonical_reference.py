"""An independent encoder of the canonical JSON format, for tests to compare against.

Structure, key order, string escaping and integers come from the stdlib
(``json.dumps(ensure_ascii=False)``, which the format's string rule equals). Float texts
are defined by orjson (see the canonical module docstring), so floats alone come from it.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def reference(value: Any) -> bytes:
    """The canonical bytes of ``value`` (raises on values the format refuses)."""
    return _text(value).encode("utf-8")  # a lone surrogate raises UnicodeEncodeError


def _text(value: Any) -> str:
    if type(value) is dict:
        members = (f"{json.dumps(key, ensure_ascii=False)}:{_text(value[key])}"
                   for key in sorted(value))  # fmt: skip
        return "{" + ",".join(members) + "}"
    if type(value) in (list, tuple):
        return "[" + ",".join(_text(item) for item in value) + "]"
    if type(value) is float:
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("NaN and infinities are not canonical")
        text = orjson.dumps(value).decode()
        assert float(text) == value and str(float(text)) == repr(value)  # round-trips
        return text
    if type(value) is int and not -(2**63) <= value < 2**64:
        raise ValueError("integers beyond 64 bits are not canonical")
    return json.dumps(value, ensure_ascii=False)
