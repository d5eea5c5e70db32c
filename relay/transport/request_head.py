"""An HTTP/1 request head, read and judged (pure): what the server connection
(:mod:`relay.transport.http_server`) needs before it calls the application.

:func:`head_pattern` is the one read that takes a head off the stream; :func:`parse_head`
turns it into a :class:`RequestHead` (request line, headers, keep-alive, body framing) or
raises the client's error. The rules and texts are Tornado 6.6's (its ``HTTP1Connection``
read heads this way before), each error turned by
:func:`~relay.transport.protocol_errors.malformed` into a message that says what to fix. A
head is judged whole before the application sees it, so a framing error is answered even
where the application would have refused the request from its head (a 401 before a 400).
"""

from __future__ import annotations

import re
from typing import Final

from tornado.httputil import HTTPHeaders, HTTPInputError, RequestStartLine, parse_request_start_line

from relay.errors import RelayError
from relay.transport.protocol_errors import headers_too_large, malformed

_DIGITS: Final = re.compile(r"[0-9]+")
_CONTENT_LENGTHS: Final = re.compile(r",[ \t]*")


def head_pattern(limit: int) -> bytes:
    """Matches a whole head: some lines, then an empty one, up to the end of the first
    ``\\r?\\n\\r?\\n`` (what Tornado reads); or else the first ``limit + 1`` bytes,
    the sign of a head over the limit (a 431). Linear: each line is matched once,
    possessively, and the lazy repeat stops at the first empty line."""
    return rb"\A(?:(?:[^\n]*+\n)+?\r?\n|[\s\S]{%d})" % (limit + 1)


class RequestHead:
    """A request's line and headers, and what they say of the connection and the body:
    ``keep_alive`` (the connection may serve another request after this one),
    ``content_length`` (None: none given) and ``chunked``."""

    __slots__ = ("chunked", "content_length", "headers", "keep_alive", "start_line")

    def __init__(
        self,
        start_line: RequestStartLine,
        headers: HTTPHeaders,
        *,
        keep_alive: bool,
        content_length: int | None,
        chunked: bool,
    ) -> None:
        self.start_line = start_line
        self.headers = headers
        self.keep_alive = keep_alive
        self.content_length = content_length
        self.chunked = chunked


def parse_head(
    data: bytes, *, limit: int, max_body_size: int, no_keep_alive: bool = False
) -> RequestHead:
    """``data`` (what :func:`head_pattern` read) as a request head; raises the client's
    error (:class:`~relay.errors.HeadersTooLarge`, :class:`~relay.errors.MalformedHTTP`)."""
    if len(data) > limit:
        raise headers_too_large(limit)
    try:
        return _parse(data, max_body_size, no_keep_alive)
    except HTTPInputError as exc:
        raise malformed(str(exc)) from None


def _parse(data: bytes, max_body_size: int, no_keep_alive: bool) -> RequestHead:
    # Blank lines before a request are ignored (RFC 7230 §3.5), a bare LF ends a line.
    text = data.decode("latin1").lstrip("\r\n")
    eol = text.find("\n")
    start_line = parse_request_start_line(text[:eol].rstrip("\r"))
    headers = HTTPHeaders.parse(text[eol:])
    chunked = _is_chunked(headers)
    return RequestHead(
        start_line,
        headers,
        keep_alive=not no_keep_alive and _keeps_alive(start_line, headers, chunked),
        content_length=_content_length(headers, max_body_size),
        chunked=chunked,
    )


def _is_chunked(headers: HTTPHeaders) -> bool:
    # As strict as Tornado: what a proxy and the relay could read differently is refused.
    if "Transfer-Encoding" not in headers:
        return False
    if "Content-Length" in headers:
        raise HTTPInputError("Message with both Transfer-Encoding and Content-Length")
    if headers["Transfer-Encoding"].lower() == "chunked":
        return True
    raise HTTPInputError("Unsupported Transfer-Encoding")


def _keeps_alive(start_line: RequestStartLine, headers: HTTPHeaders, chunked: bool) -> bool:
    connection = headers.get("Connection")
    if connection is not None:
        connection = connection.lower()
    if start_line.version == "HTTP/1.1":
        return connection != "close"
    if "Content-Length" in headers or chunked or start_line.method in ("HEAD", "GET"):
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
    length = int(value)
    if length > max_body_size:
        raise HTTPInputError("Content-Length too long")
    return length


def refusal(error: RelayError | HTTPInputError) -> RelayError:
    """The client's error for a refusal raised either way."""
    return error if isinstance(error, RelayError) else malformed(str(error))
