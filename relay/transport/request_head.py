"""An HTTP/1 request head, read and judged (pure): what the server connection
(:mod:`relay.transport.http_server`) needs around its call of the application.

:func:`head_pattern` is the one read that takes a head off the stream; :func:`parse_head`
turns it into a :class:`RequestHead` (request line, headers, keep-alive) and
:func:`body_framing` tells how its body is framed, each raising the client's error. The
rules, their order and their texts are Tornado 6.6's (its ``HTTP1Connection`` read heads
this way before), each error turned by :func:`~relay.transport.protocol_errors.malformed`
into a message that says what to fix. As with Tornado, the framing is judged after the
application has seen the head (an HTTP/1.0 request's transfer coding before, since its
keep-alive depends on it), so a handler that refuses a request from its head (401, 413
from a Content-Length too long to parse) answers first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from tornado.httputil import HTTPHeaders, HTTPInputError, RequestStartLine, parse_request_start_line

from relay.transport.protocol_errors import headers_too_large, malformed

_DIGITS: Final = re.compile(r"[0-9]+")
_CONTENT_LENGTHS: Final = re.compile(r",[ \t]*")


def head_pattern(limit: int) -> bytes:
    """Matches a whole head: some lines, then an empty one, up to the end of the first
    ``\\r?\\n\\r?\\n`` (what Tornado reads); or else the first ``limit + 1`` bytes,
    the sign of a head over the limit (a 431). Linear: each line is matched once,
    possessively, and the lazy repeat stops at the first empty line."""
    return rb"\A(?:(?:[^\n]*+\n)+?\r?\n|[\s\S]{%d})" % (limit + 1)


@dataclass(frozen=True, slots=True)
class RequestHead:
    """A request's line and headers, and ``keep_alive``: whether the connection may serve
    another request after this one."""

    start_line: RequestStartLine
    headers: HTTPHeaders
    keep_alive: bool


def parse_head(data: bytes, *, limit: int, no_keep_alive: bool = False) -> RequestHead:
    """``data`` (what :func:`head_pattern` read) as a request head; raises the client's
    error (:class:`~relay.errors.HeadersTooLarge`, :class:`~relay.errors.MalformedHTTP`)."""
    if len(data) > limit:
        raise headers_too_large(limit)
    try:
        # Blank lines before a request are ignored (RFC 7230 §3.5), a bare LF ends a line.
        text = data.decode("latin1").lstrip("\r\n")
        eol = text.find("\n")
        start_line = parse_request_start_line(text[:eol].rstrip("\r"))
        headers = HTTPHeaders.parse(text[eol:])
        keep_alive = not no_keep_alive and _keeps_alive(start_line, headers)
    except HTTPInputError as exc:
        raise malformed(str(exc)) from None
    return RequestHead(start_line, headers, keep_alive)


def body_framing(headers: HTTPHeaders, max_body_size: int) -> tuple[int | None, bool]:
    """(the Content-Length, or None; whether the body is chunked); raises the client's
    error (:class:`~relay.errors.MalformedHTTP`)."""
    try:
        return _content_length(headers, max_body_size), _is_chunked(headers)
    except HTTPInputError as exc:
        raise malformed(str(exc)) from None


def _is_chunked(headers: HTTPHeaders) -> bool:
    # As strict as Tornado: what a proxy and the relay could read differently is refused.
    if "Transfer-Encoding" not in headers:
        return False
    if "Content-Length" in headers:
        raise HTTPInputError("Message with both Transfer-Encoding and Content-Length")
    if headers["Transfer-Encoding"].lower() == "chunked":
        return True
    raise HTTPInputError("Unsupported Transfer-Encoding")


def _keeps_alive(start_line: RequestStartLine, headers: HTTPHeaders) -> bool:
    connection = headers.get("Connection")
    if connection is not None:
        connection = connection.lower()
    if start_line.version == "HTTP/1.1":
        return connection != "close"
    if "Content-Length" in headers or _is_chunked(headers) or start_line.method in ("HEAD", "GET"):
        return connection == "keep-alive"
    return False


def _content_length(headers: HTTPHeaders, max_body_size: int) -> int | None:
    if "Content-Length" not in headers:
        return None
    value = headers["Content-Length"]
    if "," in value:
        # Proxies sometimes repeat it: equal copies are one length.
        pieces = _CONTENT_LENGTHS.split(value)
        if any(piece != pieces[0] for piece in pieces):
            raise HTTPInputError("Multiple unequal Content-Lengths")
        value = headers["Content-Length"] = pieces[0]
    if _DIGITS.fullmatch(value) is None:
        raise HTTPInputError("Only integer Content-Length is allowed")
    try:
        length = int(value)
    except ValueError:  # over Python's 4,300 digits for int(str)
        raise HTTPInputError("Only integer Content-Length is allowed") from None
    if length > max_body_size:
        raise HTTPInputError("Content-Length too long")
    return length
