"""An independent encoder of the canonical JSON format, for tests to compare against,
and the history digests it implies.

Structure, key order, string escaping and integers come from the stdlib
(``json.dumps(ensure_ascii=False)``, which the format's string rule equals). Float texts
are defined by orjson (see the canonical module docstring), so floats alone come from it.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Sequence
from typing import Any

import orjson

from relay.core.envelope import normalize_message
from relay.core.history_digest import ENVELOPE_TAGS
from relay.core.limits import CanonicalLimits
from relay.core.scope import HISTORY_TAGS, Scope, build_scope

U64 = struct.Struct(">Q")


def identity_scope(**limits: int) -> Scope:
    """A fixed scope for identity tests, with ``limits`` over the default canonical ones."""
    return build_scope(
        secret=b"k" * 32,
        upstream_origin="https://api.openai.com",
        endpoint="/v1/responses",
        credential="sk",
        relay_token="rr",
        caller=None,
        upstream_body={"model": "gpt-5"},
        openai_beta=None,
        limits=CanonicalLimits(**limits),
    )


def reference_digests(
    scope: Scope, history: Sequence[Any], exclude: bool = False
) -> tuple[list[str], list[int], list[str]]:
    """``(boundaries, message sizes, envelope fingerprints)`` of ``history`` as documented:
    the reference encoding of each normalized message, framed with its u64 big-endian
    length, into one SHA-256 state started from the framed scope."""
    text = reference(scope.value)
    state = hashlib.sha256(HISTORY_TAGS[exclude] + U64.pack(len(text)) + text)
    boundaries, sizes, fingerprints = [state.hexdigest()], [], []
    for message in history:
        text = reference(normalize_message(message, exclude_reasoning_content=exclude))
        document = U64.pack(len(text)) + text
        state.update(document)
        boundaries.append(state.hexdigest())
        sizes.append(len(text))
        if type(message) is dict and message.get("role") == "assistant":
            fingerprints.append(hashlib.sha256(ENVELOPE_TAGS[exclude] + document).hexdigest())
    return boundaries, sizes, fingerprints


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
