"""Judging a request head (relay.transport.request_head) by Tornado's rules, with the
relay's messages. (The read that takes a head off the stream: test_http_server.)"""

from __future__ import annotations

import pytest

from relay.errors import HeadersTooLarge, MalformedHTTP
from relay.transport.request_head import body_framing, parse_head

LIMIT = 128
BIG = 2**62


def head(*lines: str) -> bytes:
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def framing(data: bytes, max_body_size: int = BIG) -> tuple[int | None, bool]:
    return body_framing(parse_head(data, limit=LIMIT).headers, max_body_size)


@pytest.mark.parametrize(
    ("data", "method", "keep_alive", "length", "chunked"),
    [
        (head("GET / HTTP/1.1", "Host: a"), "GET", True, None, False),
        (head("GET / HTTP/1.1", "Host: a", "Connection: close"), "GET", False, None, False),
        (head("GET / HTTP/1.0"), "GET", False, None, False),
        (head("GET / HTTP/1.0", "Connection: Keep-Alive"), "GET", True, None, False),
        (head("POST / HTTP/1.0", "Connection: keep-alive"), "POST", False, None, False),
        (
            head("POST / HTTP/1.0", "Connection: keep-alive", "Content-Length: 2"),
            "POST",
            True,
            2,
            False,
        ),
        (head("POST / HTTP/1.1", "Content-Length: 7, 7"), "POST", True, 7, False),
        (head("POST / HTTP/1.1", "Transfer-Encoding: Chunked"), "POST", True, None, True),
        (b"\r\n\r\n" + head("GET / HTTP/1.1"), "GET", True, None, False),  # blank lines first
        (b"GET / HTTP/1.1\nHost: a\n\n", "GET", True, None, False),  # bare LF lines
    ],
)
def test_what_a_head_says(
    data: bytes, method: str, keep_alive: bool, length: int | None, chunked: bool
) -> None:
    parsed = parse_head(data, limit=LIMIT)
    assert (parsed.start_line.method, parsed.keep_alive) == (method, keep_alive)
    assert framing(data) == (length, chunked)


def test_no_keep_alive_ends_every_connection() -> None:
    assert not parse_head(head("GET / HTTP/1.1"), limit=LIMIT, no_keep_alive=True).keep_alive


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (head("GARBAGE"), "request line"),
        (head("GET / HTTP/2.0"), "HTTP version"),
        (b"\r\n\r\n", "request line"),
        (head("GET / HTTP/1.1", "X: a\x00b"), "control character"),
        (head("GET / HTTP/1.1", "X"), "'Name: value'"),
        # HTTP/1.0: its keep-alive depends on the framing, judged with the head
        (head("POST / HTTP/1.0", "Transfer-Encoding: gzip"), "only 'Transfer-Encoding"),
    ],
)
def test_a_bad_head_is_the_clients_error(data: bytes, needle: str) -> None:
    with pytest.raises(MalformedHTTP) as caught:
        parse_head(data, limit=LIMIT)
    assert needle in caught.value.message


@pytest.mark.parametrize(
    ("lines", "needle"),
    [
        (["Content-Length: 1, 2"], "exactly one Content-Length"),
        (["Content-Length: -1"], "decimal digits"),
        (["Content-Length: \u00b2"], "decimal digits"),
        (["Content-Length: " + "9" * 5000], "decimal digits"),  # over int()'s digit limit
        (["Content-Length: 10"], "larger than the relay accepts"),
        (["Content-Length: 2", "Transfer-Encoding: chunked"], "not both"),
        (["Transfer-Encoding: gzip"], "only 'Transfer-Encoding"),
    ],
)
def test_a_bad_framing_is_the_clients_error(lines: list[str], needle: str) -> None:
    headers = parse_head(head("POST / HTTP/1.1", "Host: a"), limit=LIMIT).headers
    for line in lines:
        name, _, value = line.partition(": ")
        headers.add(name, value)
    with pytest.raises(MalformedHTTP) as caught:
        body_framing(headers, 9)
    assert needle in caught.value.message


def test_a_head_over_the_limit_is_431() -> None:
    with pytest.raises(HeadersTooLarge):
        parse_head(head("GET / HTTP/1.1", "X: " + "a" * LIMIT), limit=LIMIT)
