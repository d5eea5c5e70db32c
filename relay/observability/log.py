"""Safe diagnostics: fixed event names and reason codes, never bodies or secrets.

Call :func:`event` with an event name and small scalar fields (ids, counts, statuses,
reason codes); :func:`failure` for an unexpected exception, which is logged as its type
name and the code locations it passed through, never its message (a message can quote
input: a ``UnicodeEncodeError`` quotes the character it could not encode).

``RELAY_LOG_FORMAT`` picks the rendering (:func:`configure`):

- ``text`` (default): ``<time> <LEVEL> relay <event> key=value ...``; a value with
  whitespace or an unprintable character is quoted with Python's ``repr`` (so one record
  is always one line), and ``scenarios/relaylog.py`` parses it back.
- ``json``: one object per line, ``{"ts", "level", "event", "request_id", ...fields}``.

Records of other loggers (Tornado, asyncio) are rendered from their message *template*
only: the text before the first interpolated value, with the values and any exception
message dropped, because those values are whatever the library was handed (request
lines, headers, reprs of objects holding input).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sys
import traceback
from collections.abc import Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import IO, Final

LOGGER = logging.getLogger("relay")
FORMATS: Final = ("text", "json")
MAX_VALUE_CHARS: Final = 120
# Fields every JSON line has, in this order; an event's own fields follow.
FIXED_KEYS: Final = ("ts", "level", "event", "request_id")
# A library's message template up to its first interpolation, angle bracket or quote.
_TEMPLATE_PREFIX = re.compile(r"[A-Za-z0-9 _,.:;()/-]*")
_EVENT_ATTR = "relay_event"
_FIELDS_ATTR = "relay_fields"

Scalar = str | int | float | bool | None


def configure(level: str, fmt: str = "text", stream: IO[str] | None = None) -> None:
    """Send every record to ``stream`` (default stderr) in ``fmt`` at ``level`` and up."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; expected one of {FORMATS}")
    handler = SafeStreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Tornado's access log prints full URIs (and its template is all values: nothing would
    # be left of it); request_done, request_failed and unexpected_error say what is safe.
    logging.getLogger("tornado.access").setLevel(logging.CRITICAL + 1)


def event(name: str, level: int = logging.INFO, **fields: object) -> None:
    """Log event ``name`` with ``fields`` (scalars or lists of scalars, nothing secret)."""
    if LOGGER.isEnabledFor(level):
        parts = " ".join(f"{key}={_text_value(value)}" for key, value in fields.items())
        LOGGER.log(
            level,
            "%s %s",
            name,
            parts,
            extra={_EVENT_ATTR: name, _FIELDS_ATTR: fields},
        )


def failure(
    name: str,
    exc: BaseException,
    tb: TracebackType | None = None,
    level: int = logging.ERROR,
    **fields: object,
) -> None:
    """Log event ``name`` for an unexpected exception: its type and where it was raised."""
    event(
        name,
        level,
        **fields,
        error=error_type(exc),
        where=code_path(tb if tb is not None else exc.__traceback__),
    )


def error_type(exc: BaseException) -> str:
    """An exception's class name: what went wrong, without what it was handed."""
    return type(exc).__name__


def code_path(tb: TracebackType | None, frames: int = 4) -> str:
    """The innermost ``frames`` code locations of a traceback, ``file:line:function``,
    innermost first (file names relative to the package; no source text, no locals)."""
    if tb is None:
        return ""
    summary = traceback.extract_tb(tb)[-frames:]
    return "<".join(
        f"{_short_file(frame.filename)}:{frame.lineno}:{frame.name}" for frame in reversed(summary)
    )


def _short_file(filename: str) -> str:
    for marker in ("/relay/", "/tornado/", "/asyncio/", "/fakeupstream/"):
        at = filename.rfind(marker)
        if at >= 0:
            return filename[at + 1 :]
    return filename.rsplit("/", 1)[-1]


# --- rendering ---------------------------------------------------------------------------


def _clip(text: str) -> str:
    if len(text) > MAX_VALUE_CHARS:
        return text[: MAX_VALUE_CHARS - 3] + "..."
    return text


def _text_value(value: object) -> str:
    text = _clip(str(value))  # a list as Python prints it: live/context.py reads that back
    # repr() keeps a record on one line and escapes what a terminal would interpret
    # (control characters, escape sequences) and what UTF-8 cannot encode (lone
    # surrogates); plain words stay bare so the line reads as key=value.
    # (A leading quote is quoted too, or a reader would take it for a quoted value.)
    plain = (
        text != ""
        and text.isprintable()
        and not any(c.isspace() for c in text)
        and text[0] not in "'\""
    )
    return text if plain else repr(text)


def _json_value(value: object) -> object:
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, list | tuple):
        return [_json_value(item) for item in value[:32]]
    return _clip(str(value))


def _template(record: logging.LogRecord) -> str:
    """A library record's message: the template's literal text before its first value."""
    raw = record.msg if isinstance(record.msg, str) else type(record.msg).__name__
    first = raw.split("\n", 1)[0]
    match = _TEMPLATE_PREFIX.match(first)
    prefix = match.group(0) if match else ""
    cut = prefix.find("%")
    return _clip((prefix if cut < 0 else prefix[:cut]).strip())


def _exception_fields(record: logging.LogRecord) -> dict[str, object]:
    if not record.exc_info or record.exc_info[1] is None:
        return {}
    _, exc, tb = record.exc_info
    fields: dict[str, object] = {"error": error_type(exc)}
    where = code_path(tb)
    if where:
        fields["where"] = where
    return fields


def record_parts(record: logging.LogRecord) -> tuple[str, dict[str, object]]:
    """The event name and fields a record stands for (a library's: see the module doc)."""
    name = getattr(record, _EVENT_ATTR, None)
    if isinstance(name, str):
        given = getattr(record, _FIELDS_ATTR, {})
        return name, dict(given) if isinstance(given, Mapping) else {}
    fields: dict[str, object] = {"logger": record.name, "message": _template(record)}
    return "library_log", fields | _exception_fields(record)


class TextFormatter(logging.Formatter):
    """``<time> <LEVEL> <logger> <event> key=value ...`` (the default; unchanged for events)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        if isinstance(getattr(record, _EVENT_ATTR, None), str):
            record.message = record.getMessage()
        else:
            name, fields = record_parts(record)
            parts = " ".join(f"{key}={_text_value(value)}" for key, value in fields.items())
            record.message = f"{name} {parts}"
        record.asctime = self.formatTime(record, self.datefmt)
        return self.formatMessage(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per line; ASCII only, so any value is one safe line."""

    def format(self, record: logging.LogRecord) -> str:
        name, fields = record_parts(record)
        stamp = datetime.fromtimestamp(record.created, UTC)
        line: dict[str, object] = {
            "ts": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "event": name,
            "request_id": _json_value(fields.pop("request_id", None)),
        }
        for key, value in fields.items():
            line[f"field_{key}" if key in FIXED_KEYS else key] = _json_value(value)
        return json.dumps(line, ensure_ascii=True, separators=(",", ":"))


class SafeStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that never prints a record's arguments when writing it fails.

    (``logging.Handler.handleError`` prints the message and its arguments, which is
    where a value the stream could not encode would leak.)"""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        encoding = getattr(self.stream, "encoding", None) or "utf-8"
        try:
            text.encode(encoding)
        except (UnicodeEncodeError, LookupError):
            text = text.encode("ascii", "backslashreplace").decode("ascii")
        return text

    def handleError(self, record: logging.LogRecord) -> None:
        exc = sys.exc_info()[1]
        with contextlib.suppress(Exception):  # nowhere left to report it
            self.stream.write(
                f"relay: a log record could not be written "
                f"({'unknown' if exc is None else error_type(exc)})\n"
            )
