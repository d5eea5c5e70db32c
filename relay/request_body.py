"""Decoding a client's request body: content type, UTF-8, JSON, shape. Pure."""

from __future__ import annotations

import json
from typing import Any, NoReturn

from relay.errors import InvalidRequest, UnsupportedMediaType


def _reject_constant(name: str) -> NoReturn:
    raise InvalidRequest(f"request body is not valid JSON: {name} is not a JSON number")


def parse_json_object(raw: bytes, content_type: str | None) -> dict[str, Any]:
    """The body as a JSON object, or a 4xx error that says what is wrong with it."""
    if content_type:
        media = content_type.split(";", 1)[0].strip().lower()
        if media != "application/json" and not media.endswith("+json"):
            raise UnsupportedMediaType(
                f"Content-Type {media!r} is not supported; send the body as application/json"
            )
    if not raw.strip():
        raise InvalidRequest("request body is empty; send a JSON object")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest(
            f"request body is not valid UTF-8 (bad byte at offset {exc.start}); "
            "encode JSON as UTF-8"
        ) from None
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise InvalidRequest("request body is nested too deeply to be a chat request") from None
    except json.JSONDecodeError as exc:
        raise InvalidRequest(
            f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    if not isinstance(value, dict):
        raise InvalidRequest(f"request body must be a JSON object, not a JSON {_json_kind(value)}")
    return value


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
