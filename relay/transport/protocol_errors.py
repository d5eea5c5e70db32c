"""What the relay answers a request that is wrong at the HTTP/1 level (pure).

Tornado's parsers (``httputil.parse_request_start_line``, ``HTTPHeaders.parse``, the
request's Host and query checks), and the relay's own framing rules written with Tornado's
texts (:mod:`relay.transport.request_head`, :mod:`relay.transport.chunked`), refuse a
malformed request line, header or body framing with an ``HTTPInputError`` whose text names
the rule but not the fix, and sometimes quotes the offending header value (which may be a
credential). :func:`malformed` turns that text into
a :class:`~relay.errors.MalformedHTTP` whose message says what to send instead and never
quotes the request; :func:`rejection_bytes` renders the complete HTTP/1.1 answer with the
OpenAI error envelope, for the server connection to write itself.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Final

from relay.errors import HeadersTooLarge, MalformedHTTP, RelayError

# Tornado's message prefix -> ours. First match wins: a prefix of another comes after it.
_MESSAGES: Final = (
    (
        "Malformed HTTP request line",
        "malformed HTTP request line; send 'METHOD /path HTTP/1.1', e.g. "
        "'POST /v1/chat/completions HTTP/1.1'",
    ),
    (
        "Unexpected HTTP version",
        "unsupported HTTP version in the request line; the relay speaks HTTP/1.1 (and 1.0)",
    ),
    (
        "Invalid header name",
        "malformed request header: a header name may hold only letters, digits and "
        "!#$%&'*+-.^_`|~; fix or drop that header",
    ),
    (
        "Invalid header value",
        "malformed request header: a header value holds a control character (such as NUL, "
        "a bare CR or LF); remove it",
    ),
    (
        "no colon in header line",
        "malformed request header: every header line must be 'Name: value'",
    ),
    (
        "header line cannot start with whitespace",
        "malformed request header: a header line starts with whitespace (obsolete line "
        "folding is not accepted); put each header on one line",
    ),
    (
        "Multiple unequal Content-Lengths",
        "conflicting Content-Length headers; send exactly one Content-Length",
    ),
    (
        "Only integer Content-Length is allowed",
        "Content-Length must be the body's size in bytes as plain decimal digits",
    ),
    (
        "Content-Length too long",
        "Content-Length is larger than the relay accepts; shorten the request",
    ),
    (
        "Message with both Transfer-Encoding and Content-Length",
        "a request may carry Content-Length or Transfer-Encoding: chunked, not both; drop one",
    ),
    (
        "Unsupported Transfer-Encoding",
        "unsupported Transfer-Encoding; the relay accepts only 'Transfer-Encoding: "
        "chunked' (or a Content-Length)",
    ),
    (
        "invalid chunk size",
        "malformed chunked body: each chunk must start with its size in hexadecimal digits "
        "and CRLF (chunk extensions are not accepted)",
    ),
    (
        "chunk size line too long",
        "malformed chunked body: a chunk size line is longer than 64 bytes; send the size "
        "in hexadecimal digits and CRLF",
    ),
    (
        "bare LF in chunked framing",
        "malformed chunked body: a line ends with a bare LF; end each chunk size line, "
        "each chunk's data and the last chunk with CRLF (\\r\\n)",
    ),
    (
        "improperly terminated chunked request",
        "malformed chunked body: the last chunk ('0' CRLF) must be followed by CRLF "
        "(trailers are not accepted)",
    ),
    (
        "improperly terminated chunk",
        "malformed chunked body: each chunk's data must be exactly its stated size and be "
        "followed by CRLF",
    ),
    (
        "chunked body too large",
        "the chunked body is larger than the relay accepts; shorten the request",
    ),
    ("Missing Host header", "an HTTP/1.1 request needs a Host header"),
    (
        "Invalid Host header",
        "the Host header must be a host name or address, optionally with ':port'",
    ),
    ("Multiple host headers", "send exactly one Host header"),
    (
        "Invalid query string",
        "the query string cannot be parsed (too many fields, or malformed); fix the URL",
    ),
)

CHUNK_LINE_TOO_LONG: Final = "chunk size line too long"
BARE_LF: Final = "bare LF in chunked framing"  # relay.transport.chunked


def malformed(tornado_message: str) -> MalformedHTTP:
    """The client-facing error for Tornado's ``HTTPInputError`` text."""
    for prefix, message in _MESSAGES:
        if tornado_message.startswith(prefix):
            return MalformedHTTP(message)
    return MalformedHTTP(
        "malformed HTTP/1.1 request; check the request line, the headers and the body's "
        "framing (Content-Length or Transfer-Encoding: chunked)"
    )


def headers_too_large(limit: int) -> HeadersTooLarge:
    return HeadersTooLarge(
        f"the request line and headers exceed {limit} bytes; send fewer or shorter headers "
        "(the relay needs only Host, Authorization, Content-Type and Content-Length)"
    )


def rejection_bytes(error: RelayError, request_id: str, *, retry_after: int | None = None) -> bytes:
    """The whole HTTP/1.1 answer: ``error``'s status and envelope, then the connection
    closes (what followed the bad part of the request cannot be framed, or was never
    read); ``retry_after``: seconds, for a ``Retry-After`` header."""
    body = json.dumps(error.envelope()).encode()
    try:
        reason = HTTPStatus(error.status).phrase
    except ValueError:
        reason = "Error"
    head = (
        f"HTTP/1.1 {error.status} {reason}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Cache-Control: no-store\r\n"
        f"X-Request-Id: {request_id}\r\n"
        + (f"Retry-After: {retry_after}\r\n" if retry_after is not None else "")
        + "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body
