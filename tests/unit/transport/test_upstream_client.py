"""relay.transport.upstream_client: the relay's own HTTP/1.1 client, against a scripted
server on a loopback port that answers each request with the bytes a test gives.

A request leaves as one write (head and a small body together); an answer's body is read
whole in each framing (chunked, Content-Length, delimited by the close, gzip decoded); a
connection goes back to the pool only when its body was read to the last byte of an
HTTP/1.1 keep-alive answer; closing the client closes unfinished answers, and a
connection still being dialed closes as soon as its dial completes."""

from __future__ import annotations

import asyncio
import gc
import gzip
import socket
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from tornado.httputil import HTTPInputError
from tornado.iostream import IOStream, StreamClosedError
from tornado.netutil import DefaultLoopResolver

from relay.clock import ManualClock
from relay.transport.pool import ConnectionPool
from relay.transport.upstream_client import (
    ONE_WRITE_BYTES,
    Response,
    Target,
    UpstreamClient,
    request_head,
)
from scenarios.faults.network import tcp_sockets
from scenarios.wait import wait_until

CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def chunked(*payloads: bytes) -> bytes:
    return CHUNKED + b"".join(chunk(p) for p in payloads) + b"0\r\n\r\n"


@dataclass
class Server:
    """Answers the n-th request on any connection with ``answers[n]``, then closes the
    connection if ``close_after`` says so; records each request's head and body."""

    answers: list[bytes]
    close_after: bool = False
    requests: list[tuple[bytes, bytes]] = field(default_factory=list)
    connections: int = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.answers:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
                    return  # the client closed it (or the test ended)
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length")), 0)  # fmt: skip
                self.requests.append((head, await reader.readexactly(length)))
                writer.write(self.answers.pop(0))
                await writer.drain()
                if self.close_after:
                    return
        finally:
            writer.close()


@asynccontextmanager
async def serving(server: Server) -> AsyncIterator[tuple[UpstreamClient, str]]:
    listener = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    client = UpstreamClient(ManualClock())
    try:
        yield client, f"http://127.0.0.1:{port}/v1/responses?x=1"
    finally:
        client.close()
        listener.close()
        await listener.wait_closed()


async def body_of(response: Response) -> bytes:
    body = b""
    while (data := await response.read()) is not None:
        body += data
    return body


async def post(client: UpstreamClient, url: str, body: bytes = b"{}") -> Response:
    return await client.request(
        "POST", url, {"Content-Type": "application/json"}, body, connect_timeout_s=5
    )


def run(test: Any) -> None:
    asyncio.run(test())


def test_the_head_names_the_target_host_and_length_and_keeps_the_connection() -> None:
    target = Target.of("https://api.example.com/v1/responses?a=b")
    assert target == Target("api.example.com", 443, True, "/v1/responses?a=b")
    head = request_head("POST", target, {"Authorization": "Bearer k"}, b"{}")
    assert head == (
        b"POST /v1/responses?a=b HTTP/1.1\r\nAuthorization: Bearer k\r\n"
        b"Host: api.example.com\r\nConnection: keep-alive\r\n"
        b"User-Agent: reasoning-replay-relay\r\nContent-Length: 2\r\n\r\n"
    )
    assert Target.of("http://[::1]:8080/v1").host_header == "[::1]:8080"
    with pytest.raises(ValueError, match="line break"):
        request_head("GET", target, {"X": "a\r\nInjected: yes"}, None)
    with pytest.raises(ValueError, match="not an http"):
        Target.of("ftp://example.com/")


@pytest.mark.parametrize(("size", "writes"), [(100, 1), (ONE_WRITE_BYTES + 1, 2)])
def test_a_small_body_leaves_in_the_heads_write(
    size: int, writes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[bytes] = []
    write = IOStream.write

    def spy(stream: IOStream, data: Any) -> Any:
        written.append(bytes(data))
        return write(stream, data)

    monkeypatch.setattr(IOStream, "write", spy)

    async def test() -> None:
        server = Server([chunked(b"ok")])
        async with serving(server) as (client, url):
            body = b"x" * size
            response = await post(client, url, body)
            assert await body_of(response) == b"ok"
        assert len(written) == writes
        assert b"".join(written) == server.requests[0][0] + server.requests[0][1]
        assert server.requests[0][1] == body

    run(test)


@pytest.mark.parametrize(
    ("answer", "body", "reused"),
    [
        (chunked(b"event one\n", b"event two\n"), b"event one\nevent two\n", True),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", b"hello", True),
        (b"HTTP/1.1 204 No Content\r\n\r\n", b"", True),
        (b"HTTP/1.1 100 Continue\r\n\r\n" + chunked(b"after"), b"after", True),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi", b"hi", False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", b"hi", False),
        (
            b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s"
            % (len(gzip.compress(b"zipped")), gzip.compress(b"zipped")),
            b"zipped",
            True,
        ),
        # Bytes after the last chunk: not at a request boundary, so never reused.
        (chunked(b"data") + b"HTTP/1.1 200 OK\r\n", b"data", False),
    ],
    ids=["chunked", "length", "no-body", "interim", "close", "http10", "gzip", "trailing"],
)
def test_each_framing_is_read_whole_and_only_a_clean_end_is_kept(
    answer: bytes, body: bytes, reused: bool
) -> None:
    async def test() -> None:
        server = Server([answer, chunked(b"second")])
        async with serving(server) as (client, url):
            response = await post(client, url)
            assert await body_of(response) == body
            assert response.ended and await response.read() is None
            assert client.pool.idle() == (1 if reused else 0)
            second = await post(client, url)
            assert await body_of(second) == b"second"
            assert client.pool.reused == (1 if reused else 0)
            assert server.connections == (1 if reused else 2)

    run(test)


def test_a_body_delimited_by_the_close_ends_with_it() -> None:
    async def test() -> None:
        server = Server([b"HTTP/1.1 200 OK\r\n\r\nuntil the end"], close_after=True)
        async with serving(server) as (client, url):
            response = await post(client, url)
            assert await body_of(response) == b"until the end"
            assert client.pool.idle() == 0

    run(test)


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 5x\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\nhello",
    ],
)
def test_a_malformed_length_is_refused(answer: bytes) -> None:
    async def test() -> None:
        async with serving(Server([answer])) as (client, url):
            with pytest.raises(HTTPInputError):
                await post(client, url)
            assert client.pool.idle() == 0

    run(test)


def test_a_body_cut_short_fails_and_closing_the_client_ends_unfinished_answers() -> None:
    async def test() -> None:
        cut = Server([b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf"], close_after=True)
        async with serving(cut) as (client, url):
            response = await post(client, url)
            assert await response.read() == b"half"
            with pytest.raises(StreamClosedError):
                await response.read()
        open_ended = Server([CHUNKED + chunk(b"first")])  # the body never ends
        async with serving(open_ended) as (client, url):
            response = await post(client, url)
            assert await response.read() == b"first"
            pending = asyncio.ensure_future(response.read())
            await asyncio.sleep(0)
            client.close()
            with pytest.raises(StreamClosedError):
                await pending

    run(test)


def test_an_ip_literal_is_not_resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    async def resolve(*args: Any) -> Any:
        raise AssertionError("an IP literal went to the resolver")

    monkeypatch.setattr(DefaultLoopResolver, "resolve", resolve)

    async def test() -> None:
        async with serving(Server([chunked(b"ok")])) as (client, url):
            assert await body_of(await post(client, url)) == b"ok"

    run(test)


SYN_SENT = "02"  # /proc/net/tcp's state of a connect the listener has not answered yet


def test_a_connection_dialed_while_the_client_closes_is_closed_when_the_dial_completes() -> None:
    """Shutdown while a dial is in progress: a listener whose backlog is full drops the
    SYN, so the connect is still pending when the client closes. Once the backlog is
    freed, the SYN's retransmission completes the dial: the stream is closed at once
    (the peer reads EOF, no request), the pool keeps nothing, the request fails as one
    whose connection was closed, and no socket is left for the garbage collector."""

    async def test() -> None:
        with socket.create_server(("127.0.0.1", 0), backlog=0) as listener:
            port = listener.getsockname()[1]
            filler = socket.create_connection(("127.0.0.1", port))  # the one queued slot
            pool = ConnectionPool(ManualClock())
            client = UpstreamClient(ManualClock(), pool)
            request = asyncio.ensure_future(post(client, f"http://127.0.0.1:{port}/v1"))
            await asyncio.to_thread(  # polled off the loop: the dial runs meanwhile
                wait_until,
                lambda: any(s.remote_port == port and s.state == SYN_SENT for s in tcp_sockets()),
                timeout=10,
                what="the dial to wait for the full backlog",
            )
            assert not request.done()
            client.close()
            listener.accept()[0].close()  # a slot frees: the retransmitted SYN gets in
            filler.close()
            with pytest.raises(StreamClosedError):
                await asyncio.wait_for(request, 10)
            late, _ = listener.accept()
            with late:
                late.settimeout(10)
                assert late.recv(64) == b""  # EOF: closed at once, nothing was written
            assert pool.idle() == 0
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gc.collect()
        assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []

    run(test)
