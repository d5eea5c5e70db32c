"""The upstream idle deadline measures upstream silence only: time the relay spends
blocked on a slow client (backpressure) never fires it. Real loopback to the fake; the
deadline runs on a manual clock and is checked by hand, so no test waits for real time."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from fakeupstream.fake import FakeUpstream
from relay.clock import ManualClock
from relay.errors import UpstreamTimeout
from relay.transport.upstream import UpstreamExchange, UpstreamLimits, make_http_client

IDLE_S = 5.0
LIMITS = UpstreamLimits(idle_timeout_s=IDLE_S, max_response_bytes=2**24, max_sse_event_bytes=2**20)
BODY = {"model": "gpt-5", "input": [{"role": "user", "content": "hi"}], "stream": True}


async def exchange_with(
    fake: FakeUpstream, clock: ManualClock, client_ready: asyncio.Event, *, events: int = 1
) -> tuple[UpstreamExchange, asyncio.Event]:
    """An exchange whose sink waits for ``client_ready`` at every event, as a stalled
    client makes it; the returned event is set once ``events`` events reached the sink."""
    reached = asyncio.Event()
    seen: list[str] = []

    async def sink(event_type: str, data: dict[str, Any]) -> None:
        seen.append(event_type)
        if len(seen) >= events:
            reached.set()
        await client_ready.wait()

    exchange = UpstreamExchange(
        client=make_http_client(clock), clock=clock, limits=LIMITS,
        url=f"{fake.base_url}/responses", headers={"Authorization": "Bearer sk-idle"},
        body=json.dumps(BODY).encode(), sink=sink,
    )  # fmt: skip
    return exchange, reached


def expire_idle_deadline(exchange: UpstreamExchange, clock: ManualClock) -> None:
    clock.advance(10 * IDLE_S)
    assert exchange._idle is not None  # white box: fire it now instead of waiting
    exchange._idle.check()


def test_a_client_blocked_longer_than_the_idle_timeout_still_gets_its_answer() -> None:
    async def main() -> None:
        fake = FakeUpstream(seed=3)
        await fake.start()
        clock = ManualClock()
        client_ready = asyncio.Event()
        exchange, blocked = await exchange_with(fake, clock, client_ready)
        try:
            running = asyncio.ensure_future(exchange.run())
            await blocked.wait()  # the sink is waiting on the client
            expire_idle_deadline(exchange, clock)
            client_ready.set()
            await running
            assert exchange.terminal_event == "response.completed"
        finally:
            exchange.client.close()
            await fake.stop()

    asyncio.run(main())


def test_a_silent_upstream_still_times_out() -> None:
    async def main() -> None:
        fake = FakeUpstream(seed=3)
        await fake.start()
        fake.enqueue({"toxics": {"hang_after_events": 2}})
        clock = ManualClock()
        client_ready = asyncio.Event()
        client_ready.set()  # a client that keeps up
        exchange, both = await exchange_with(fake, clock, client_ready, events=2)
        try:
            running = asyncio.ensure_future(exchange.run())
            await both.wait()  # both frames were delivered; the upstream is silent now
            expire_idle_deadline(exchange, clock)
            with pytest.raises(UpstreamTimeout, match="RELAY_IDLE_TIMEOUT_MS"):
                await running
        finally:
            exchange.client.close()
            await fake.stop()

    asyncio.run(main())
