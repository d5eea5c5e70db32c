"""Downstream Chat Completions SSE frames: ``data: <json>\\n\\n`` lines, no ``event:`` line.

JSON is compact and UTF-8; ``json.dumps`` escapes CR and LF, so a frame is always exactly
one ``data:`` line.

Speed: a stream encodes one frame per delta, nearly all of them one text piece in an
otherwise fixed chunk (same id, model, choice). Such a chunk's frame is its template (the
frame of the same chunk with an empty piece, encoded once per stream by the encoder) with
the JSON string of the piece put in; every other chunk is encoded whole. Both give the
bytes the encoder gives for the whole chunk.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from json.encoder import encode_basestring
from typing import Any, Final

try:
    from _json import make_encoder
except ImportError:  # pragma: no cover - CPython has it
    make_encoder = None  # type: ignore[assignment,misc]

DONE: bytes = b"data: [DONE]\n\n"
# A comment line: EventSource parsers and the openai SDK skip it; proxies see traffic.
KEEPALIVE: bytes = b": keepalive\n\n"


def compact_json(*, allow_nan: bool) -> Callable[[Any], str]:
    """``JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=...).encode``,
    with its C encoder built once: ``json.dumps`` with any non-default option, and
    ``JSONEncoder.encode`` itself, build one per call, and a stream encodes one frame
    per event. Without circular-reference markers, which only matter for an object that
    contains itself (frames are trees: parsed JSON and fresh containers)."""
    encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=allow_nan)
    if make_encoder is None:  # pragma: no cover - CPython has it
        return encoder.encode
    encode = make_encoder(
        None, encoder.default, encode_basestring, None, ":", ",", False, False, allow_nan
    )

    def to_json(payload: Any) -> str:
        return "".join(encode(payload, 0))

    return to_json


_to_json: Final = compact_json(allow_nan=False)


def _frame(payload: Mapping[str, Any]) -> bytes:
    return b"data: " + _to_json(payload).encode("utf-8") + b"\n\n"


# --- one-piece text chunks ----------------------------------------------------------------

_HEAD = ("id", "object", "created", "model", "choices")
_HEAD_USAGE = (*_HEAD, "usage")
_CHOICE = ("index", "delta", "finish_reason", "logprobs")
# What follows the piece's JSON string in a frame, without and with "usage": null.
_TAILS = (
    b'},"finish_reason":null,"logprobs":null}]}\n\n',
    b'},"finish_reason":null,"logprobs":null}],"usage":null}\n\n',
)
_TEMPLATE_CACHE_SIZE = 256  # a few per live stream
# (id, object, created, model, choice index, delta key, usage?) -> frame before the piece
_heads: dict[tuple[str, str, int, str, int, str, bool], bytes] = {}


def _text_frame(chunk: dict[str, Any]) -> bytes | None:
    """The frame of a chunk whose only content is one text piece, from its template; None
    for any other chunk. Every value the template holds is checked for its exact type, so
    equal values of other types (``1`` and ``True``) never share a template."""
    keys = tuple(chunk)
    if keys == _HEAD:
        usage = False
    elif keys == _HEAD_USAGE and chunk["usage"] is None:
        usage = True
    else:
        return None
    choices = chunk["choices"]
    if type(choices) is not list or len(choices) != 1:
        return None
    choice = choices[0]
    if (
        type(choice) is not dict
        or tuple(choice) != _CHOICE
        or choice["finish_reason"] is not None
        or choice["logprobs"] is not None
    ):
        return None
    delta = choice["delta"]
    if type(delta) is not dict or len(delta) != 1:
        return None
    ((kind, piece),) = delta.items()
    completion_id, obj, created, model = (
        chunk["id"],
        chunk["object"],
        chunk["created"],
        chunk["model"],
    )
    index = choice["index"]
    if not (
        type(piece) is str
        and type(kind) is str
        and type(completion_id) is str
        and type(obj) is str
        and type(model) is str
        and type(created) is int
        and type(index) is int
    ):
        return None
    key = (completion_id, obj, created, model, index, kind, usage)
    head = _heads.get(key)
    tail = _TAILS[usage]
    if head is None:
        probe = {name: chunk[name] for name in _HEAD}
        probe["choices"] = [{**choice, "delta": {kind: ""}}]
        if usage:
            probe["usage"] = None
        frame = _frame(probe)
        head = frame[: len(frame) - len(tail) - 2]
        if frame[len(head) :] != b'""' + tail:  # pragma: no cover - the encoder's own layout
            return None
        if len(_heads) >= _TEMPLATE_CACHE_SIZE:
            _heads.clear()
        _heads[key] = head
    try:
        return head + encode_basestring(piece).encode("utf-8") + tail
    except UnicodeEncodeError:
        return None  # a lone surrogate: encoding the whole chunk raises it as it always did


def encode_chunk(chunk: Mapping[str, Any]) -> bytes:
    """One ``chat.completion.chunk`` as an SSE frame."""
    if type(chunk) is dict:
        frame = _text_frame(chunk)
        if frame is not None:
            return frame
    return _frame(chunk)


def encode_error(envelope: Mapping[str, Any]) -> bytes:
    """An error envelope (``{"error": {...}}``) as an SSE frame; the SDK raises on it."""
    if not isinstance(envelope.get("error"), Mapping):
        raise TypeError("an error frame needs an OpenAI error envelope: {'error': {...}}")
    return _frame(envelope)
