"""relay.transport.upstream: ``UpstreamExchange.events()``, the linear loop the shell
consumes. A scripted upstream on a loopback port writes each read when the test says so:
the events come in order with ``BATCH_DONE`` closing each read and nothing after the
terminal event; the next read waits until the consumer took the last one (backpressure);
what the consumer raises propagates as itself and ends the exchange; an abort (the client
gone) ends the loop with its reason; an upstream fault mid-read comes after the events
before it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field

import pytest

from relay.clock import ManualClock
from relay.errors import StoreFull, UpstreamProtocolError
from relay.transport.upstream import (
    BATCH_DONE,
    YIELD_EVERY_BYTES,
    ClientGone,
    UpstreamExchange,
    UpstreamItem,
    UpstreamLimits,
    make_http_client,
)

LIMITS = UpstreamLimits(idle_timeout_s=60.0, max_response_bytes=2**24, max_sse_event_bytes=2**20)
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def sse(event_type: str, **fields: object) -> bytes:
    data = json.dumps({"type": event_type, **fields})
    return f"event: {event_type}\ndata: {data}\n\n".encode()


def chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


HANG_UP = b""  # Upstream.send: written nothing, it waits for the relay's close
CREATED = sse("response.created", response={})
DELTA = sse("response.output_text.delta", delta="hi")
COMPLETED = sse("response.completed", response={"status": "completed"})


@dataclass
class Upstream:
    """Writes one HTTP chunk per ``send`` (each a read of its own on the relay's side)."""

    pieces: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)
    closed: asyncio.Event = field(default_factory=asyncio.Event)  # the relay hung up
    served: asyncio.Event = field(default_factory=asyncio.Event)
    written: asyncio.Event = field(default_factory=asyncio.Event)  # a piece is on the wire
    connected: bool = False

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connected = True
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))  # fmt: skip
            await reader.readexactly(length)
            writer.write(HEAD)
            while (piece := await self.pieces.get()) is not None:
                if piece == HANG_UP:  # wait for the relay to close the connection
                    if not await reader.read(1):
                        self.closed.set()
                    return
                writer.write(chunk(piece))
                await writer.drain()
                self.written.set()
        finally:
            writer.close()
            self.served.set()

    def send(self, piece: bytes | None) -> None:
        self.pieces.put_nowait(piece)


@asynccontextmanager
async def scripted() -> AsyncIterator[tuple[Upstream, UpstreamExchange]]:
    upstream = Upstream()
    server = await asyncio.start_server(upstream.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = make_http_client(ManualClock())
    exchange = UpstreamExchange(
        client=client, clock=ManualClock(), limits=LIMITS,
        url=f"http://127.0.0.1:{port}/v1/responses",
        headers={"Content-Type": "application/json"}, body=b'{"stream": true}',
    )  # fmt: skip
    try:
        yield upstream, exchange
    finally:
        upstream.send(None)
        if upstream.connected:
            await upstream.served.wait()
        client.close()
        server.close()
        await server.wait_closed()


def types(items: list[UpstreamItem]) -> list[str]:
    return ["BATCH_DONE" if item is BATCH_DONE else item[0] for item in items]  # type: ignore[index]


def test_events_come_in_order_each_read_closed_by_a_batch_marker() -> None:
    async def main() -> list[UpstreamItem]:
        async with scripted() as (upstream, exchange):
            upstream.send(CREATED + DELTA)
            got: list[UpstreamItem] = []
            async with aclosing(exchange.events()) as events:
                async for item in events:
                    got.append(item)
                    if item is BATCH_DONE:  # the next read only once this one was taken
                        upstream.send(COMPLETED + DELTA)  # after the terminal: ignored
            return got

    got = asyncio.run(main())
    assert types(got) == ["response.created", "response.output_text.delta", "BATCH_DONE",
                          "response.completed"]  # fmt: skip
    assert got[1] == ("response.output_text.delta",
                      {"type": "response.output_text.delta", "delta": "hi"})  # fmt: skip


def test_a_consumer_holding_an_event_pauses_the_reads() -> None:
    async def main() -> None:
        async with scripted() as (upstream, exchange):
            upstream.send(CREATED)
            async with aclosing(exchange.events()) as events:
                assert await anext(events) == ("response.created",
                                               {"type": "response.created", "response": {}})  # fmt: skip
                upstream.written.clear()
                upstream.send(DELTA)  # written while the consumer still holds CREATED
                await upstream.written.wait()
                for _ in range(20):  # let the relay's loop read whatever it would
                    await asyncio.sleep(0)
                # Only the first read was handed over; the second waits for the consumer.
                assert exchange.bytes_received == len(CREATED)
                assert exchange._delivering
                assert await anext(events) is BATCH_DONE
                assert (await anext(events))[0] == "response.output_text.delta"  # type: ignore[index]
                assert exchange.bytes_received == len(CREATED) + len(DELTA)

    asyncio.run(main())


def test_what_the_consumer_raises_propagates_and_ends_the_exchange() -> None:
    failure = StoreFull("reasoning cache x: commit failed (SQLITE_FULL)")

    async def main() -> None:
        async with scripted() as (upstream, exchange):
            upstream.send(CREATED + DELTA)
            with pytest.raises(StoreFull) as raised:
                async with aclosing(exchange.events()) as events:
                    async for _ in events:
                        raise failure
            assert raised.value is failure  # itself, not a connection abort's stand-in
            upstream.send(HANG_UP)
            await upstream.closed.wait()  # the connection was closed: nothing more is read

    asyncio.run(main())


def test_an_abort_while_the_consumer_waits_ends_the_loop_with_its_reason() -> None:
    async def main() -> None:
        async with scripted() as (upstream, exchange):
            upstream.send(CREATED)
            got: list[UpstreamItem] = []
            with pytest.raises(ClientGone):
                async with aclosing(exchange.events()) as events:
                    async for item in events:
                        got.append(item)
                        if item is BATCH_DONE:  # the upstream is silent now
                            asyncio.get_running_loop().call_soon(exchange.abort, ClientGone())
            assert types(got) == ["response.created", "BATCH_DONE"]

    asyncio.run(main())


def test_an_upstream_fault_mid_read_follows_the_events_before_it() -> None:
    async def main() -> list[UpstreamItem]:
        async with scripted() as (upstream, exchange):
            upstream.send(CREATED + b"data: [DONE]\n\n" + DELTA)
            got: list[UpstreamItem] = []
            with pytest.raises(UpstreamProtocolError, match=r"\[DONE\] before a terminal"):
                async with aclosing(exchange.events()) as events:
                    async for item in events:
                        got.append(item)
            return got

    assert types(asyncio.run(main())) == ["response.created"]  # no batch marker: it failed


def test_an_exchange_aborted_before_it_started_raises_at_once() -> None:
    async def main() -> None:
        async with scripted() as (_, exchange):
            exchange.abort(ClientGone())
            with pytest.raises(ClientGone):
                async with aclosing(exchange.events()) as events:
                    async for _ in events:
                        raise AssertionError("nothing is read")

    asyncio.run(main())


async def first_read_taken(upstream: Upstream, events: AsyncIterator[UpstreamItem]) -> None:
    """The head and a first read (CREATED) were taken: the exchange waits on the socket."""
    upstream.send(CREATED)
    assert (await anext(events))[0] == "response.created"  # type: ignore[index]
    assert await anext(events) is BATCH_DONE
    upstream.written.clear()


def test_a_read_is_handed_over_in_the_loop_iteration_that_reads_it() -> None:
    """Nothing between the socket and the consumer waits for the loop: with the bytes on
    the wire, one step of ``anext`` reads them, decodes them and yields the event (a
    handoff through futures took loop turns, each a wake-up on a busy machine)."""

    async def main() -> None:
        async with scripted() as (upstream, exchange), aclosing(exchange.events()) as events:
            await first_read_taken(upstream, events)
            upstream.send(DELTA)
            await upstream.written.wait()  # on loopback: in the relay's socket buffer
            step = events.__anext__()
            with pytest.raises(StopIteration) as done:
                step.send(None)  # one step of the coroutine: it must not suspend
            assert done.value.value[0] == "response.output_text.delta"

    asyncio.run(main())


def test_an_upstream_that_is_always_ready_still_leaves_the_loop_a_turn() -> None:
    """Reads of buffered bytes take no loop turn; every YIELD_EVERY_BYTES handled, the
    exchange gives the loop one, so the other connections are served meanwhile."""

    async def main() -> list[int]:
        async with scripted() as (upstream, exchange), aclosing(exchange.events()) as events:
            await first_read_taken(upstream, events)
            upstream.send(DELTA * (YIELD_EVERY_BYTES // len(DELTA) + 1) + COMPLETED)
            await upstream.written.wait()  # all of it buffered on the relay's side
            turns = [0]
            asyncio.get_running_loop().call_soon(lambda: turns.__setitem__(0, 1))
            return [turns[0] async for item in events if item is not BATCH_DONE]

    seen = asyncio.run(main())
    assert seen[0] == 0  # the first events came with no loop turn
    assert seen[-1] == 1  # the loop had its turn before the terminal event
