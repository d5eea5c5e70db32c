"""Downstream write deadlines: per write, and the fixed delivery window after completion."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tornado.iostream import StreamClosedError

from relay.clock import ManualClock
from relay.transport.downstream import Downstream
from relay.transport.upstream import ClientGone


class StubStream:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class StubHandler:
    """A RequestHandler stand-in whose flushes finish only when the test says so."""

    def __init__(self, at_once: BaseException | bool = False) -> None:
        self.at_once = at_once  # each flush done when made: True, or failed with this
        self.written: list[bytes] = []
        self.flushes: list[asyncio.Future[None]] = []
        self.stream = StubStream()
        self.request: Any = type("Req", (), {"connection": type("C", (), {"stream": self.stream})})

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def flush(self) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if isinstance(self.at_once, BaseException):
            future.set_exception(self.at_once)
        elif self.at_once:
            future.set_result(None)
        self.flushes.append(future)
        return future


def downstream(handler: StubHandler, clock: ManualClock, write_timeout_s: float) -> Downstream:
    return Downstream(
        handler,  # type: ignore[arg-type]
        clock,
        write_timeout_s=write_timeout_s,
        keepalive_s=0,
        keepalive_frame=b"",
    )


def test_a_drained_write_counts_its_frames() -> None:
    asyncio.run(_test_a_drained_write_counts_its_frames())


async def _test_a_drained_write_counts_its_frames() -> None:
    handler, clock = StubHandler(), ManualClock()
    down = downstream(handler, clock, 30)
    down.queue(b"a")
    down.queue(b"b")
    task = asyncio.ensure_future(down.drain())
    await asyncio.sleep(0)
    handler.flushes[0].set_result(None)
    await task
    assert (down.frames_sent, handler.written) == (2, [b"a", b"b"])


@pytest.mark.parametrize(
    ("at_once", "gone"), [(True, False), (StreamClosedError(), True)], ids=["taken", "closed"]
)
def test_a_flush_done_at_once_needs_no_wait(at_once: BaseException | bool, gone: bool) -> None:
    asyncio.run(_test_a_flush_done_at_once_needs_no_wait(at_once, gone))


async def _test_a_flush_done_at_once_needs_no_wait(
    at_once: BaseException | bool, gone: bool
) -> None:
    handler, clock = StubHandler(at_once), ManualClock()
    down = downstream(handler, clock, 30)
    down.queue(b"a")
    if gone:
        with pytest.raises(ClientGone):
            await down.drain()
    else:
        await down.drain()
    assert (down.closed, down.frames_sent) == (gone, 0 if gone else 1)
    assert not handler.stream.closed  # no deadline fired


def test_an_exhausted_delivery_window_cuts_the_next_write_at_once() -> None:
    asyncio.run(_test_an_exhausted_delivery_window_cuts_the_next_write_at_once())


async def _test_an_exhausted_delivery_window_cuts_the_next_write_at_once() -> None:
    handler, clock = StubHandler(), ManualClock()
    down = downstream(handler, clock, write_timeout_s=3600)  # the per-write bound is far
    down.start_delivery(5)
    clock.advance(6)  # the client took more than the whole delivery window
    down.queue(b"terminal")
    drain = asyncio.ensure_future(down.drain())
    await asyncio.sleep(0.05)  # the zero-length deadline fires on the next loop turn
    assert handler.stream.closed and down.closed
    handler.flushes[0].set_exception(ConnectionError("closed"))
    with pytest.raises((ClientGone, ConnectionError)):
        await drain


def test_the_delivery_window_starts_once() -> None:
    asyncio.run(_test_the_delivery_window_starts_once())


async def _test_the_delivery_window_starts_once() -> None:
    handler, clock = StubHandler(), ManualClock()
    down = downstream(handler, clock, write_timeout_s=3600)
    down.start_delivery(5)
    clock.advance(4)
    down.start_delivery(5)  # a second call must not extend it
    clock.advance(2)
    down.queue(b"x")
    drain = asyncio.ensure_future(down.drain())
    await asyncio.sleep(0.05)
    assert down.closed
    handler.flushes[0].set_exception(ConnectionError("closed"))
    with pytest.raises((ClientGone, ConnectionError)):
        await drain
