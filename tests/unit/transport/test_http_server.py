"""The pure parts of the relay's HTTP/1 server: the wait for a whole head, the answers."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.errors import HeadersTooLarge, MalformedHTTP
from relay.transport.http_server import head_ready_pattern
from relay.transport.protocol_errors import headers_too_large, malformed, rejection_bytes

TORNADO_HEAD_END = re.compile(rb"\r?\n\r?\n")  # what HTTP1Connection reads a head up to
LIMIT = 32

heads = st.binary(max_size=80) | st.lists(
    st.sampled_from([b"\r", b"\n", b"\r\n", b"a", b"Host: x", b" "]), max_size=30
).map(b"".join)


@given(heads)
def test_the_wait_ends_exactly_when_tornados_read_could(data: bytes) -> None:
    found = re.search(head_ready_pattern(LIMIT), data)
    if TORNADO_HEAD_END.search(data) is not None:
        assert found is not None and found.span() == (0, 0)  # a whole head: nothing consumed
    elif len(data) > LIMIT:
        assert found is not None and found.span() == (0, LIMIT + 1)  # too much: 431
    else:
        assert found is None  # wait for more


def test_the_wait_is_linear_in_a_long_head_without_an_end() -> None:
    # A head that never ends, in the shapes worst for backtracking: a pattern that
    # backtracked over lines would not finish here.
    pattern = re.compile(head_ready_pattern(65536))
    for shape in (b"a: b\r\n", b"\r", b"\r\n ", b"x"):
        data = shape * (65536 // len(shape))
        assert pattern.search(data) is None


@pytest.mark.parametrize(
    ("tornado", "needle"),
    [
        ("Malformed HTTP request line", "request line"),
        ("Invalid header value '\\x00secret'", "control character"),
        ("improperly terminated chunked request", "trailers"),
        ("improperly terminated chunk", "exactly its stated size"),
        ("Multiple unequal Content-Lengths: '1, 2'", "exactly one"),
    ],
)
def test_tornados_texts_become_fixes(tornado: str, needle: str) -> None:
    error = malformed(tornado)
    assert isinstance(error, MalformedHTTP)
    assert needle in error.message
    assert "secret" not in error.message  # Tornado quotes header values; we never do


def test_an_unknown_text_gets_a_general_answer() -> None:
    assert "malformed HTTP/1.1 request" in malformed("something new in Tornado 7").message


def test_the_rejection_is_one_complete_http_answer() -> None:
    error = headers_too_large(65536)
    assert isinstance(error, HeadersTooLarge)
    raw = rejection_bytes(error, "req_1")
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("ascii").split("\r\n")
    assert lines[0] == "HTTP/1.1 431 Request Header Fields Too Large"
    assert f"Content-Length: {len(body)}" in lines
    assert "Connection: close" in lines
    assert "X-Request-Id: req_1" in lines
    assert json.loads(body) == error.envelope()
