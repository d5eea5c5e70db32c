"""Decoding a client's request body: content coding, content type, UTF-8, JSON, shape.
Pure.

Beyond JSON's grammar, two things in a syntactically valid body are refused here, with the
JSON path of the value, because nothing later could carry them: a string holding a lone
UTF-16 surrogate (``"\\ud800"``: JSON's escape syntax allows it, UTF-8 cannot encode it,
so it could be neither hashed, stored nor forwarded) and a number the relay cannot
represent (an integer over Python's digit limit, a float beyond the double range).
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any, Final, NoReturn

import orjson

from relay.errors import InternalSignal, InvalidRequest, UnsupportedMediaType

# A \uD800-\uDFFF escape anywhere in the text: only then can a parsed string hold a
# surrogate (the text itself is valid UTF-8, which has none). Valid pairs match too.
_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# _fast_loads: each digit as "0", any other byte as NUL; then 19 digits in a row (2**63
# has 19) are one substring search
_DIGITS_ONLY: Final = bytes(0x30 if 0x30 <= byte <= 0x39 else 0 for byte in range(256))
_DIGIT_RUN: Final = b"0" * 19
# Levels of containers a piecewise parse walks in Python: a body, its messages (or input
# items), each message, its content parts; below that, each value is one C call.
_WALKED_DEPTH: Final = 4
_Scan = Callable[[str, int], tuple[Any, int]]
# The json module's Python parser functions (the C scanner's rules), untyped in typeshed.
_JSON_OBJECT: Final[Callable[..., tuple[Any, int]]] = json.decoder.JSONObject  # type: ignore[attr-defined]
_JSON_ARRAY: Final[Callable[..., tuple[Any, int]]] = json.decoder.JSONArray  # type: ignore[attr-defined]
_WHITESPACE: Final[re.Pattern[str]] = json.decoder.WHITESPACE  # type: ignore[attr-defined]


class _UnrepresentableNumber(InternalSignal, ValueError):  # json's hook must raise ValueError
    """A number literal no Python number (or no finite float) can hold."""

    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description


def _reject_constant(name: str) -> NoReturn:
    raise InvalidRequest(f"request body is not valid JSON: {name} is not a JSON number")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):  # 1e400 would become inf, which JSON cannot carry on
        shown = literal if len(literal) <= 24 else literal[:20] + "..."
        raise _UnrepresentableNumber(f"{shown} is beyond the range of a double")
    return value


def check_content_encoding(declared: str | None) -> None:
    """Refuse (415) a body declared compressed: the relay reads bodies as sent and does
    not decompress them (docs/design.md §8). ``identity``, or no header, is accepted."""
    if declared is None:
        return
    codings = [c.strip().lower() for c in declared.split(",")]
    refused = [c for c in codings if c not in ("", "identity")]
    if refused:
        shown = refused[0] if len(refused[0]) <= 40 else refused[0][:37] + "..."
        raise UnsupportedMediaType(
            f"Content-Encoding {shown!r} is not supported; send the body uncompressed "
            "(no Content-Encoding header, or Content-Encoding: identity)",
            code="unsupported_content_encoding",
        )


def parse_json_object(
    raw: bytes | bytearray, content_type: str | None, *, piecewise: bool = False
) -> dict[str, Any]:
    """The body as a JSON object, or a 4xx error that says what is wrong with it.

    ``piecewise``: the same value or error, parsed in many short calls instead of one
    long one, for a large body parsed on a worker thread (see :func:`_piecewise_loads`)."""
    if content_type:
        media = content_type.split(";", 1)[0].strip().lower()
        if media != "application/json" and not media.endswith("+json"):
            raise UnsupportedMediaType(
                f"Content-Type {media!r} is not supported; send the body as application/json"
            )
    if not raw or raw.isspace():  # (strip() would copy the body)
        raise InvalidRequest("request body is empty; send a JSON object")
    value = None if piecewise else _fast_loads(raw)
    if isinstance(value, dict):
        # orjson checked the UTF-8 and refuses a lone surrogate: nothing left to look for
        return value
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest(
            f"request body is not valid UTF-8 (bad byte at offset {exc.start}); "
            "encode JSON as UTF-8"
        ) from None
    try:
        value = _loads(text, piecewise, parse_float=_finite_float)
    except ValueError:  # an integer over the digit limit, or an infinite float
        value = _without_unrepresentable_numbers(text, piecewise)
    if not isinstance(value, dict):
        raise InvalidRequest(f"request body must be a JSON object, not a JSON {_json_kind(value)}")
    if _has_surrogate_escape(text, piecewise) and _has_surrogate(value):
        _reject_lone_surrogate(value)
    return value


def _fast_loads(raw: bytes | bytearray) -> Any:
    """orjson's parse of ``raw`` where it is certainly the value the stdlib path below
    gives, else ``None`` (then the stdlib parses it: the same value, or the 400 that
    names what is wrong). orjson refuses whatever the stdlib path would refuse or treat
    specially (invalid JSON, NaN and Infinity, a float beyond the double range, a lone
    surrogate, nesting deeper than 1,024); reads floats correctly rounded, as ``float()``
    does; and keeps the last of duplicate keys in the first one's place, as ``json``
    does. The one value it reads differently, an integer beyond 64 bits (a float, not an
    int), has at least 19 digits in a row, so a body with such a run anywhere (in a
    string too: cheaper to look for everywhere) goes the stdlib's way."""
    if _DIGIT_RUN in raw.translate(_DIGITS_ONLY):
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def _loads(text: str, piecewise: bool, **hooks: Any) -> Any:
    """``json.loads`` with the syntax errors as 400s; number errors propagate."""
    try:
        if piecewise:
            return _piecewise_loads(text, parse_constant=_reject_constant, **hooks)
        return json.loads(text, parse_constant=_reject_constant, **hooks)
    except RecursionError:
        raise InvalidRequest("request body is nested too deeply to be a chat request") from None
    except json.JSONDecodeError as exc:
        raise InvalidRequest(
            f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None


def _piecewise_loads(text: str, **hooks: Any) -> Any:
    """``json.loads(text, **hooks)``: the same value, the same errors at the same places,
    but no single call into C longer than one deep value.

    ``json.loads`` is one C call that holds the GIL throughout (a second or more for
    50 MB of small objects), so on a worker thread it would still stall the event loop.
    Here the containers of the first :data:`_WALKED_DEPTH` levels are walked by the json
    module's own Python functions (``JSONObject``, ``JSONArray``: the C scanner's rules
    and messages), and every value below them is parsed by the C scanner in its own
    call; between calls the thread gives the GIL up at Python's switch interval.
    """
    if text.startswith("\ufeff"):  # as json.loads
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    leaf: _Scan = json.JSONDecoder(**hooks).scan_once  # type: ignore[attr-defined]
    memo: dict[str, str] = {}
    scanners: list[_Scan] = []

    def scanner(depth: int) -> _Scan:
        def scan(s: str, idx: int) -> tuple[Any, int]:
            char = s[idx : idx + 1]
            if char == "{":
                return _JSON_OBJECT((s, idx + 1), True, scanners[depth + 1], None, None, memo)
            if char == "[":
                return _JSON_ARRAY((s, idx + 1), scanners[depth + 1])
            return leaf(s, idx)

        return scan

    scanners += [scanner(depth) for depth in range(_WALKED_DEPTH)] + [leaf]
    try:
        value, end = scanners[0](text, _skip_whitespace(text, 0))
    except StopIteration as err:
        raise json.JSONDecodeError("Expecting value", text, err.value) from None
    end = _skip_whitespace(text, end)
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


def _skip_whitespace(text: str, at: int) -> int:
    match = _WHITESPACE.match(text, at)
    return match.end() if match is not None else at


class _BadNumber:
    """Stands in for an unrepresentable number while its path is looked for."""

    __slots__ = ("description",)

    def __init__(self, description: str) -> None:
        self.description = description


def _marked_int(literal: str) -> int | _BadNumber:
    try:
        return int(literal)
    except ValueError:
        limit = sys.get_int_max_str_digits()
        digits = len(literal.lstrip("-"))
        return _BadNumber(f"an integer of {digits} digits, more than the {limit} the relay accepts")


def _marked_float(literal: str) -> float | _BadNumber:
    try:
        return _finite_float(literal)
    except _UnrepresentableNumber as exc:
        return _BadNumber(exc.description)


def _without_unrepresentable_numbers(text: str, piecewise: bool) -> Any:
    """Parse again, marking the numbers that failed; 400 naming the first one kept.

    Only reached when a number failed, so the slower hooks cost nothing otherwise. A
    failed number that a later duplicate key replaced is not in the value: then the value
    is fine as it is.
    """
    value = _loads(text, piecewise, parse_int=_marked_int, parse_float=_marked_float)
    for path, item in _walk(value):
        if isinstance(item, _BadNumber):
            raise InvalidRequest(
                f"{path or 'the request body'} is a number the relay cannot represent "
                f"({item.description}); send a finite number within the range of a "
                "double, or an integer of fewer digits",
                param=path or None,
            )
    return value


def _has_surrogate_escape(text: str, piecewise: bool) -> bool:
    if not piecewise:
        return _SURROGATE_ESCAPE.search(text) is not None
    # In windows of 1 MiB (a search holds the GIL), overlapping by an escape's length.
    step = 1 << 20
    return any(
        _SURROGATE_ESCAPE.search(text, start, start + step + 5) is not None
        for start in range(0, len(text), step)
    )


def _has_surrogate(value: Any) -> bool:
    # Encoding in C and searching the result costs far less than walking in Python;
    # the walk (below) runs only to name the field once there is one.
    try:
        return _SURROGATE.search(json.dumps(value, ensure_ascii=False)) is not None
    except RecursionError:  # nested about as deep as the parser allows: walk instead
        return True


def _reject_lone_surrogate(value: Any) -> None:
    for path, item in _walk(value):
        if isinstance(item, str):
            found, where = _SURROGATE.search(item), path
        elif isinstance(item, dict):
            found = next(filter(None, map(_SURROGATE.search, item)), None)
            where = f"a key in {path or 'the request body'}"
        else:
            continue
        if found is not None:
            raise InvalidRequest(
                f"{where} holds a lone UTF-16 surrogate (\\u{ord(found.group()):04x}), which "
                "is not valid Unicode; escape a character outside the Basic Multilingual "
                "Plane as a surrogate pair (e.g. \\ud83d\\ude00) or send it as UTF-8",
                param=path or None,
            )


def _walk(value: Any) -> Iterator[tuple[str, Any]]:
    """``(path, node)`` for every node in document order, without recursion (the body
    may be nested as deep as the parser allows)."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, node = stack.pop()
        yield path, node
        if isinstance(node, dict):
            stack.extend((_key_path(path, k), v) for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(node))))


def _key_path(path: str, key: str) -> str:
    if _IDENTIFIER.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"  # ASCII: a key's own surrogate prints as an escape


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"
