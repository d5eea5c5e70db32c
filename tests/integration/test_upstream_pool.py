"""Kept-alive upstream connections, over real loopback sockets to the fake upstream.

The fake records each request's client address and port (``peer``): equal peers mean one
reused connection. Each test runs its own event loop with a fresh client and fake.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from fakeupstream.fake import FakeUpstream
from relay.clock import Clock, ManualClock, SystemClock
from relay.errors import UpstreamError, UpstreamHTTPError
from relay.transport import upstream_client
from relay.transport.chunked import ChunkedDecoder
from relay.transport.pool import IDLE_S, ConnectionPool
from relay.transport.upstream import UpstreamExchange, UpstreamLimits, make_http_client
from tests.support.stack import Stack

LIMITS = UpstreamLimits(idle_timeout_s=10, max_response_bytes=2**24, max_sse_event_bytes=2**20)
BODY = {"model": "gpt-5", "input": [{"role": "user", "content": "hi"}], "stream": True}


class Upstream:
    """One fake and one pooled client on the running loop."""

    def __init__(self, fake: FakeUpstream, clock: Clock) -> None:
        self.fake = fake
        self.clock = clock
        self.pool = ConnectionPool(clock)
        self.client = make_http_client(clock, self.pool)

    async def exchange(self, limits: UpstreamLimits = LIMITS) -> UpstreamExchange:
        events: list[str] = []

        async def sink(event_type: str, data: dict[str, Any]) -> None:
            events.append(event_type)

        exchange = UpstreamExchange(
            client=self.client,
            clock=self.clock,
            limits=limits,
            url=f"{self.fake.base_url}/responses",
            headers={"Authorization": "Bearer sk-pool", "Content-Type": "application/json"},
            body=json.dumps(BODY).encode(),
            sink=sink,
        )
        await exchange.run()
        assert events[-1] == exchange.terminal_event == "response.completed"
        return exchange

    @property
    def peers(self) -> list[str]:
        assert all(r.peer for r in self.fake.requests)
        return [r.peer for r in self.fake.requests]


def linger_after_the_terminal_event(up: Upstream) -> None:
    """The next answer sends every frame the first one did, then keeps its body open."""
    frames = len(up.fake.requests[0].events)
    up.fake.enqueue({"toxics": {"hang_after_events": frames}})


def draining(seconds: float) -> UpstreamLimits:
    return dataclasses.replace(LIMITS, drain_timeout_s=seconds)


def run(test: Callable[[Upstream], Awaitable[None]], clock: Clock | None = None) -> None:
    async def main() -> None:
        fake = FakeUpstream(seed=7)
        await fake.start()
        upstream = Upstream(fake, clock or SystemClock())
        try:
            await test(upstream)
        finally:
            upstream.client.close()
            await fake.stop()

    asyncio.run(main())


def test_sequential_exchanges_share_one_connection() -> None:
    async def test(up: Upstream) -> None:
        for _ in range(3):
            await up.exchange()
        assert len(set(up.peers)) == 1
        assert up.pool.reused == 2
        assert up.pool.idle() == 1

    run(test)


def test_a_connection_the_upstream_dropped_is_not_reused() -> None:
    async def test(up: Upstream) -> None:
        await up.exchange()
        await up.fake.drop_connections()  # the relay side has not seen the EOF yet
        await up.exchange()
        first, second = up.peers
        assert first != second
        assert up.pool.reused == 0

    run(test)


def test_idle_connections_expire() -> None:
    clock = ManualClock()

    async def test(up: Upstream) -> None:
        await up.exchange()
        clock.advance(IDLE_S - 1)
        await up.exchange()
        clock.advance(IDLE_S + 1)
        await up.exchange()
        first, second, third = up.peers
        assert first == second != third

    run(test, clock)


@pytest.mark.parametrize(
    ("headers", "reused"),
    [({}, True), ({"Connection": "close"}, False)],
    ids=["keep-alive", "connection-close"],
)
def test_error_answers_are_read_whole_and_reused_unless_closed(
    headers: dict[str, str], reused: bool
) -> None:
    async def test(up: Upstream) -> None:
        up.fake.enqueue(
            {"http_error": {"status": 429, "type": "rate_limit_exceeded",
                            "message": "slow down", "headers": headers}}
        )  # fmt: skip
        with pytest.raises(UpstreamHTTPError):
            await up.exchange()
        await up.exchange()
        first, second = up.peers
        assert (first == second) is reused

    run(test)


@pytest.mark.parametrize(
    "toxics",
    [{"reset_after_events": 3}, {"cut_after_events": 3, "cut_mode": "close"}],
    ids=["reset", "close"],
)
def test_a_broken_stream_leaves_no_connection_behind(toxics: dict[str, Any]) -> None:
    async def test(up: Upstream) -> None:
        up.fake.enqueue({"toxics": toxics})
        with pytest.raises(UpstreamError):
            await up.exchange()
        assert up.pool.idle() == 0
        await up.exchange()
        first, second = up.peers
        assert first != second

    run(test)


def test_a_body_that_lingers_after_the_terminal_event_is_closed_after_the_drain() -> None:
    async def test(up: Upstream) -> None:
        await up.exchange()
        linger_after_the_terminal_event(up)
        await up.exchange(draining(0.05))
        await up.fake.wait_for_requests(2, within_s=10)  # the relay closed it
        assert up.fake.requests[1].ended == "client_gone"
        await up.exchange()
        first, second, third = up.peers
        assert first == second != third
        assert up.pool.idle() == 1

    run(test)


def test_closing_the_client_closes_idle_and_draining_connections() -> None:
    async def test(up: Upstream) -> None:
        await up.exchange()
        linger_after_the_terminal_event(up)
        await up.exchange(draining(3600))
        await up.exchange()  # a second connection, kept idle while the first drains
        assert up.pool.idle() == 1
        up.client.close()
        assert up.pool.idle() == 0
        await up.fake.wait_for_requests(3, within_s=10)  # the draining one ended too
        assert up.fake.requests[1].ended == "client_gone"

    run(test)


def test_relay_requests_share_the_upstream_connection(stack: Stack) -> None:
    client = stack.openai()
    for _ in range(2):
        client.chat.completions.create(
            model="gpt-5", messages=[{"role": "user", "content": "hi"}], stream=False
        )
    first, second = (r.peer for r in stack.fake.requests)
    assert first == second


# -- chunked bodies, read in bulk (relay.transport.chunked) ----------------------------


def test_many_small_chunks_then_the_connection_serves_the_next_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One chunk per event, each flushed: 300 text deltas arrive whole, and the kept-alive
    connection, read to the body's last byte and not beyond, serves the next answer."""

    async def test(up: Upstream) -> None:
        script = {"output": [{"type": "message", "text": "x" * 300}], "delta_size": 1}
        up.fake.enqueue(script, script)
        for _ in range(2):
            exchange = await up.exchange()
            assert exchange.bytes_received > 300 * 100
        assert len(up.fake.requests[0].events) > 300
        first, second = up.peers
        assert first == second
        assert up.pool.reused == 1
        assert len(decoders) == 2 and all(d.done for d in decoders)  # read to the end

    decoders: list[ChunkedDecoder] = []

    class Counted(ChunkedDecoder):
        def __init__(self, max_body_size: int) -> None:
            super().__init__(max_body_size)
            decoders.append(self)

    monkeypatch.setattr(upstream_client, "ChunkedDecoder", Counted)
    run(test)


ANSWER_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
COMPLETED = b'event: response.completed\ndata: {"type": "response.completed", "response": {}}\n\n'
CREATED = b'event: response.created\ndata: {"type": "response.created", "response": {}}\n\n'


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


MALFORMED = "malformed HTTP framing"


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (chunk(CREATED) + b"zz\r\n" + COMPLETED, MALFORMED),  # invalid chunk size
        # An extension: refused, as Tornado does.
        (chunk(CREATED) + b"5;name=value\r\nevent\r\n", MALFORMED),
        # Improperly terminated.
        (chunk(CREATED) + b"%x\r\n%sXY" % (len(COMPLETED), COMPLETED), MALFORMED),
        (chunk(CREATED) + b"0" * 70 + b"\r\n", MALFORMED),  # a size line over 64 bytes
        (chunk(CREATED) + b"%x\r\nevent: resp" % len(COMPLETED), "connection closed"),
    ],
    ids=["size", "extension", "terminator", "long-line", "closed"],
)
def test_a_malformed_chunked_body_fails_and_its_connection_is_not_kept(
    body: bytes, kind: str
) -> None:
    """A broken chunked body (ChunkedDecoder is as strict as Tornado's reader) ends the
    exchange with a protocol error naming what broke, never quoting the bytes; the
    connection is closed, not pooled."""

    async def fail() -> tuple[str, str]:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(len(json.dumps(BODY)))
            writer.write(ANSWER_HEAD + body)
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        pool = ConnectionPool(SystemClock())
        client = make_http_client(SystemClock(), pool)

        async def sink(event_type: str, data: dict[str, Any]) -> None:
            pass

        exchange = UpstreamExchange(
            client=client, clock=SystemClock(), limits=LIMITS,
            url=f"http://127.0.0.1:{port}/v1/responses",
            headers={"Content-Type": "application/json"},
            body=json.dumps(BODY).encode(), sink=sink,
        )  # fmt: skip
        try:
            with pytest.raises(UpstreamError) as failed:
                await exchange.run()
            assert pool.idle() == 0
        finally:
            client.close()
            server.close()
            await server.wait_closed()
        return type(failed.value).__name__, str(failed.value)

    assert asyncio.run(fail()) == (
        "UpstreamProtocolError",
        f"the upstream connection broke mid-stream ({kind}) before a terminal event",
    )
