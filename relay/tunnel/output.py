"""What a tunnel program prints: its public HTTPS URL, and lines safe to show.

Pure functions over text (no I/O), used by :mod:`relay.tunnel.supervisor`:

* :func:`public_url` finds the public URL a line announces. Structured lines are read by
  field: ngrok's ``--log stdout`` logfmt (``lvl=info msg="started tunnel" ...
  url=https://…``) and JSON log lines (ngrok's ``--log-format json``; cloudflared's
  ``"message"``) are trusted only through their ``url`` field or their message. Other
  lines (cloudflared's box banner ``|  https://….trycloudflare.com  |``, any other
  program) are scanned for https URLs. Either way a URL counts only if it is a bare
  ``https`` origin on a public name: no path (that rules out the documentation and API
  links cloudflared prints, ``https://api.trycloudflare.com/tunnel`` in its failure line),
  no user info, query or fragment, never ``http``, never a loopback, private or
  link-local address, ``localhost`` or a single-label name. Warning and error lines
  announce nothing.
* :func:`sanitize` turns a line into something safe to print: control characters and
  terminal escapes gone, known secrets, ``token=…``-style values, bearer credentials, URL
  user info and queries and long token-like strings redacted, length capped. ngrok prints
  its authtoken in some error messages; this is what keeps it off the console.
* :class:`LineSplitter` cuts a byte stream into bounded lines.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

REDACTED = "[redacted]"
MAX_SHOWN_CHARS = 240
MAX_LINE_BYTES = 16 * 1024

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_HTTPS = re.compile(r"https://[^\s\"'<>|()\[\]{}`\\,]+", re.IGNORECASE)
_LOGFMT_PAIR = re.compile(r'(?:^|\s)([A-Za-z_][\w.]*)=("(?:[^"\\]|\\.)*"|\S*)')
_BAD_LEVELS = {"warn", "warning", "eror", "err", "error", "crit", "critical", "fatal", "ftl"}
# cloudflared's ``2024-05-01T10:00:00Z ERR …``, log15's ``EROR[05-01|10:00:00] …``.
_LEVEL_WORD = re.compile(r"^(?:\S+\s+)?(WRN|WARN|WARNING|ERR|ERROR|EROR|CRIT|FTL|FATAL)\b")
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")

# The names of secrets, not one.
_SECRET_WORDS = r"(?:token|secret|passw(?:or)?d|api[_-]?key|authorization|credential)"  # noqa: S105
_SECRET_NAME = rf"[\w.-]*{_SECRET_WORDS}[\w.-]*"
_NAMED_SECRET = re.compile(
    rf"""(?ix)
    (?P<name>"?{_SECRET_NAME}"?)
    (?P<sep>\s*[=:]\s*)
    (?P<value>"(?:[^"\\]|\\.)*"|'[^']*'|[^\s,;&]+)
    """
)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")
_QUERY = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^\s?#\"']*)\?[^\s\"']*")
# A run that long mixing letters and digits is a credential far more often than a word.
_TOKEN_LIKE = re.compile(r"[A-Za-z0-9_+/=-]{24,}")


def public_url(line: str) -> str | None:
    """The public HTTPS origin ``line`` announces (``https://host[:port]``), if any."""
    text = _strip_terminal(line).strip()
    if text.startswith(("{", "[")) and (data := _json(text)) is not None:
        return _from_json(data)
    if _LEVEL_WORD.match(text):
        return None
    pairs = dict(_LOGFMT_PAIR.findall(text))
    if "lvl" in pairs or "level" in pairs or "url" in pairs:
        return _from_logfmt(pairs)
    return _first_origin(text)


def public_origin(candidate: str) -> str | None:
    """``candidate`` as a normalised origin if it is a bare https origin on a public name."""
    candidate = candidate.rstrip(".:;!")
    try:
        parts = urlsplit(candidate)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() != "https" or parts.path not in ("", "/"):
        return None
    if parts.query or parts.fragment or "@" in parts.netloc or "?" in candidate:
        return None
    host = (parts.hostname or "").rstrip(".")
    if not _is_public_host(host):
        return None
    shown = f"[{host}]" if ":" in host else host
    return f"https://{shown}" + ("" if port in (None, 443) else f":{port}")


def sanitize(line: str, secrets: Iterable[str] = ()) -> str:
    """``line`` with secrets redacted and terminal noise removed, at most 240 characters."""
    text = re.sub(r"[\t\r\n]", " ", _strip_terminal(line)).strip()
    for secret in sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _NAMED_SECRET.sub(lambda m: f"{m.group('name')}{m.group('sep')}{REDACTED}", text)
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    text = _QUERY.sub(lambda m: f"{m.group(1)}?{REDACTED}", text)
    text = _TOKEN_LIKE.sub(_redact_token_like, text)
    if len(text) > MAX_SHOWN_CHARS:
        text = text[: MAX_SHOWN_CHARS - 3] + "..."
    return text


class LineSplitter:
    """Bytes in, complete decoded lines out; a line longer than ``max_bytes`` is cut there
    (the rest up to its newline is dropped) so a program printing without newlines cannot
    grow our buffer."""

    def __init__(self, max_bytes: int = MAX_LINE_BYTES) -> None:
        self._max = max_bytes
        self._buffer = bytearray()
        self._skipping = False

    def feed(self, data: bytes) -> list[str]:
        lines: list[str] = []
        for piece in re.split(rb"(\r\n|\n|\r)", data):
            if piece in (b"\r\n", b"\n", b"\r"):
                if not self._skipping:
                    lines.append(self._take())
                self._skipping = False
                continue
            if self._skipping:
                continue
            self._buffer += piece
            if len(self._buffer) >= self._max:
                del self._buffer[self._max :]
                lines.append(self._take())
                self._skipping = True
        return [line for line in lines if line.strip()]

    def close(self) -> list[str]:
        """The last line, if the stream ended without a newline."""
        rest = [] if self._skipping else [self._take()]
        self._skipping = False
        return [line for line in rest if line.strip()]

    def _take(self) -> str:
        text = self._buffer.decode("utf-8", errors="replace")
        self._buffer.clear()
        return text


def _strip_terminal(text: str) -> str:
    return _CONTROL.sub("", _ANSI.sub("", text))


def _json(text: str) -> object | None:
    """The JSON value of a line, ``None`` if it is not one. A line (up to 16 KiB) can nest
    deeper than the interpreter's recursion limit: that is not JSON we read either."""
    try:
        return json.loads(text)  # type: ignore[no-any-return]
    except (ValueError, RecursionError):
        return None


def _from_json(data: object) -> str | None:
    if not isinstance(data, dict):
        return None
    level = data.get("lvl", data.get("level"))
    if isinstance(level, str) and level.lower() in _BAD_LEVELS:
        return None
    url = data.get("url")
    if isinstance(url, str):
        return public_origin(url)
    for key in ("msg", "message"):
        message = data.get(key)
        if isinstance(message, str) and (found := _first_origin(message)) is not None:
            return found
    return None


def _from_logfmt(pairs: dict[str, str]) -> str | None:
    level = _unquote(pairs.get("lvl", pairs.get("level", ""))).lower()
    if level in _BAD_LEVELS:
        return None
    url = pairs.get("url")
    return public_origin(_unquote(url)) if url is not None else None


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            decoded = json.loads(value)
        except ValueError:
            return value[1:-1]
        return decoded if isinstance(decoded, str) else value[1:-1]
    return value


def _first_origin(text: str) -> str | None:
    for match in _HTTPS.finditer(text):
        origin = public_origin(match.group(0))
        if origin is not None:
            return origin
    return None


def _is_public_host(host: str) -> bool:
    host = host.lower()
    if not host:
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        labels = host.split(".")
        if len(labels) < 2 or labels[-1] in ("localhost", "local", "internal", "lan", "home"):
            return False
        return all(_LABEL.match(label) for label in labels) and not labels[-1].isdigit()
    return address.is_global


def _redact_token_like(match: re.Match[str]) -> str:
    run = match.group(0)
    has_letter = any(c.isalpha() for c in run)
    has_digit = any(c.isdigit() for c in run)
    return REDACTED if has_letter and has_digit else run
