"""The relay's HTTP/1 server: the read that takes a head, the refusals' answers (pure), and
the connection's HTTP/1.1 rules over a loopback socket."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tornado.netutil import bind_sockets
from tornado.web import Application, RequestHandler

from relay.errors import HeadersTooLarge, MalformedHTTP
from relay.transport.http_server import RelayHTTPServer
from relay.transport.protocol_errors import headers_too_large, malformed, rejection_bytes
from relay.transport.request_head import head_pattern
from tests.support.raw_http import ProtocolViolation, read_answers

TORNADO_HEAD_END = re.compile(rb"\r?\n\r?\n")  # what HTTP1Connection reads a head up to
LIMIT = 32

heads = st.binary(max_size=80) | st.lists(
    st.sampled_from([b"\r", b"\n", b"\r\n", b"a", b"Host: x", b" "]), max_size=30
).map(b"".join)


@given(heads)
def test_the_head_read_takes_exactly_what_tornados_took(data: bytes) -> None:
    found = re.search(head_pattern(LIMIT), data)
    end = TORNADO_HEAD_END.search(data)
    if end is not None:
        assert found is not None and found.span() == (0, end.end())  # a whole head
    elif len(data) > LIMIT:
        assert found is not None and found.span() == (0, LIMIT + 1)  # too much: 431
    else:
        assert found is None  # wait for more


def test_the_head_read_is_linear_in_a_long_head_without_an_end() -> None:
    # A head that never ends, in the shapes worst for backtracking: a pattern that
    # backtracked over lines would not finish here.
    pattern = re.compile(head_pattern(65536))
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


# --- the connection, over a loopback socket ------------------------------------------


class Rules(RequestHandler):
    """Answers by the path: what the connection must frame."""

    started: asyncio.Event
    closed: asyncio.Event

    async def get(self, what: str) -> None:
        if what == "stream":  # no Content-Length: chunked on HTTP/1.1
            self.write("a")
            await self.flush()
            self.write("b")
        elif what == "unchanged":
            self.set_status(304)
        elif what == "peer":
            self.write(f"{self.request.remote_ip} {self.request.protocol}")
        elif what == "hang":  # until the client goes
            Rules.started.set()
            await Rules.closed.wait()
        else:
            self.write("hello")

    def head(self, what: str) -> None:
        self.set_header("Content-Length", "5")

    def post(self, what: str) -> None:
        self.write(self.request.body[::-1])

    def on_connection_close(self) -> None:
        Rules.closed.set()


@contextlib.asynccontextmanager
async def served(**kwargs: Any) -> AsyncIterator[tuple[RelayHTTPServer, int]]:
    Rules.started, Rules.closed = asyncio.Event(), asyncio.Event()
    server = RelayHTTPServer(Application([(r"/(\w*)", Rules)]), **kwargs)
    [sock] = bind_sockets(0, "127.0.0.1")
    server.add_sockets([sock])
    try:
        yield server, sock.getsockname()[1]
    finally:
        server.stop()
        await server.close_all_connections()


async def talk(
    port: int, data: bytes, answers: int, *, head_only: bool = False
) -> tuple[bytes, bool]:
    """Send ``data``; read until ``answers`` final answers are whole or the server closes.
    Returns what came and whether the connection was still open then (an answer the server
    closes right after may still say open: assert its ``Connection: close`` instead)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    received = b""
    try:
        while True:
            with contextlib.suppress(ProtocolViolation, ValueError):
                final = [a for a in read_answers(received, head_only=head_only) if a.status >= 200]
                # (an answer ended by the close is whole only at the close)
                if len(final) >= answers and not final[-1].until_close:
                    return received, not reader.at_eof()
            chunk = await asyncio.wait_for(reader.read(65536), 5)
            if not chunk:
                return received, False
            received += chunk
    finally:
        writer.close()


def get(path: str, *headers: str, version: str = "1.1", method: str = "GET") -> bytes:
    return "\r\n".join([f"{method} {path} HTTP/{version}", "Host: t", *headers, "", ""]).encode()


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())  # type: ignore[arg-type]


def test_a_streamed_answer_is_chunked_and_the_connection_kept() -> None:
    async def test() -> None:
        async with served() as (_, port):
            data, open_ = await talk(port, get("/stream") + get("/plain"), 2)
            stream, plain = read_answers(data)
            assert stream.header("transfer-encoding") == "chunked"
            assert data.startswith(b"HTTP/1.1 200 OK\r\n")
            assert b"1\r\na\r\n" in data and b"1\r\nb\r\n0\r\n\r\n" in data  # one chunk a write
            assert (stream.body, plain.body) == (b"ab", b"hello")
            assert plain.header("content-length") == "5"
            assert open_

    run(test)


def test_http_1_0_is_closed_after_a_streamed_answer_unless_kept_alive() -> None:
    async def test() -> None:
        async with served() as (_, port):
            data, open_ = await talk(port, get("/stream", version="1.0"), 1)
            [answer] = read_answers(data)
            assert answer.until_close and answer.body == b"ab" and not open_
            data, open_ = await talk(port, get("/", "Connection: keep-alive", version="1.0"), 1)
            [answer] = read_answers(data)
            assert answer.header("connection") == "Keep-Alive" and open_

    run(test)


def test_head_and_304_answers_have_no_body() -> None:
    async def test() -> None:
        async with served() as (_, port):
            data, open_ = await talk(port, get("/", method="HEAD"), 1, head_only=True)
            [answer] = read_answers(data, head_only=True)
            assert (answer.header("content-length"), answer.body) == ("5", b"")
            assert open_
            data, open_ = await talk(port, get("/unchanged") + get("/plain"), 2)
            unchanged, plain = read_answers(data)
            assert unchanged.status == 304 and unchanged.header("transfer-encoding") is None
            assert plain.body == b"hello" and open_

    run(test)


def test_connection_close_is_answered_and_done() -> None:
    async def test() -> None:
        async with served() as (_, port):
            data, open_ = await talk(port, get("/", "Connection: close") + get("/"), 2)
            assert [a.header("connection") for a in read_answers(data)] == ["close"]
            assert not open_

    run(test)


def test_expect_100_continue_and_a_body() -> None:
    async def test() -> None:
        async with served() as (_, port):
            request = get("/", "Expect: 100-continue", "Content-Length: 3", method="POST")
            data, _ = await talk(port, request + b"abc", 1)
            go_on, answer = read_answers(data)
            assert go_on.status == 100 and answer.body == b"cba"

    run(test)


def test_the_request_knows_its_peer() -> None:
    async def test() -> None:
        async with served() as (_, port):
            [answer] = read_answers((await talk(port, get("/peer"), 1))[0])
            assert answer.body == b"127.0.0.1 http"

    run(test)


def test_the_application_hears_of_a_client_gone_mid_answer() -> None:
    async def test() -> None:
        async with served() as (_, port):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(get("/hang"))
            await writer.drain()
            await asyncio.wait_for(Rules.started.wait(), 5)
            writer.close()
            await asyncio.wait_for(Rules.closed.wait(), 5)

    run(test)


def test_a_kept_alive_connection_is_closed_after_the_idle_timeout() -> None:
    async def test() -> None:
        async with served(idle_connection_timeout=0.05) as (server, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(get("/"))
            # read() returns at the close: the idle timeout's, long before this one's.
            data = await asyncio.wait_for(reader.read(), 5)
            writer.close()
            assert [a.status for a in read_answers(data)] == [200]
            assert not server.connections

    run(test)


@pytest.mark.parametrize(
    ("framing", "needle"),
    [
        ("Content-Length: " + "9" * 5000, "decimal digits"),  # over int()'s digit limit
        ("Transfer-Encoding: gzip", "only 'Transfer-Encoding: chunked'"),
    ],
)
def test_a_framing_error_is_answered_with_the_envelope(framing: str, needle: str) -> None:
    async def test() -> None:
        async with served() as (_, port):
            data, _ = await talk(port, get("/", framing, method="POST"), 1)
            [answer] = read_answers(data)
            assert (answer.status, answer.header("connection")) == (400, "close")
            assert needle in json.loads(answer.body)["error"]["message"]

    run(test)
