"""The keep-alive pool's rules on real socket pairs: what counts as idle, which connection
is handed out, how many wait, and when they expire (on a manual clock)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Coroutine
from typing import Any

from tornado.iostream import IOStream

from relay.clock import ManualClock
from relay.transport.pool import ConnectionPool, Origin, _quiet

ORIGIN: Origin = ("127.0.0.1", 8080, False)
OTHER: Origin = ("127.0.0.1", 8081, False)


_opened: list[socket.socket] = []


def pair() -> tuple[IOStream, socket.socket]:
    """A client-side stream and the server end of its socket (closed by :func:`run`)."""
    ours, theirs = socket.socketpair()
    _opened.extend((ours, theirs))
    return IOStream(ours), theirs


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    try:
        asyncio.run(test())  # the pool's expiry timers need a running loop
    finally:
        while _opened:
            _opened.pop().close()


def test_quiet_means_open_with_nothing_waiting() -> None:
    async def test() -> None:
        idle, _keep = pair()
        assert _quiet(idle)
        spoke, theirs = pair()
        theirs.send(b"x")  # not yet read by the loop: only the socket knows
        assert not _quiet(spoke)
        hung_up, theirs2 = pair()
        theirs2.close()  # EOF waiting, close not yet processed by the stream
        assert not _quiet(hung_up)
        closed, _keep2 = pair()
        closed.close()
        assert not _quiet(closed)

    run(test)


def test_checkout_gives_the_newest_live_connection_of_that_origin() -> None:
    async def test() -> None:
        pool = ConnectionPool(ManualClock())
        (older, _a), (newer, _b), (other, _c) = pair(), pair(), pair()
        for stream, origin in ((older, ORIGIN), (newer, ORIGIN), (other, OTHER)):
            pool.remember(stream, origin)
            pool.checkin(stream)
        assert pool.idle() == 3
        assert pool.checkout(ORIGIN) is newer
        assert pool.checkout(ORIGIN) is older
        assert pool.checkout(ORIGIN) is None
        assert pool.checkout(OTHER) is other
        assert pool.reused == 3

    run(test)


def test_a_connection_that_spoke_or_hung_up_while_idle_is_closed_not_handed_out() -> None:
    async def test() -> None:
        pool = ConnectionPool(ManualClock())
        (good, _a), (spoke, theirs), (hung_up, theirs2) = pair(), pair(), pair()
        for stream in (good, spoke, hung_up):
            pool.remember(stream, ORIGIN)
            pool.checkin(stream)
        theirs.send(b"HTTP/1.1 408 Request Timeout\r\n\r\n")
        theirs2.close()
        assert pool.checkout(ORIGIN) is good
        assert hung_up.closed() and spoke.closed()
        assert pool.reused == 1

    run(test)


def test_unknown_or_busy_streams_are_closed_at_checkin() -> None:
    async def test() -> None:
        pool = ConnectionPool(ManualClock())
        stranger, _a = pair()
        pool.checkin(stranger)  # never dialed by this pool: its origin is unknown
        assert stranger.closed()
        busy, theirs = pair()
        pool.remember(busy, ORIGIN)
        theirs.send(b"more")
        pool.checkin(busy)
        assert busy.closed()
        assert pool.idle() == 0

    run(test)


def test_at_most_max_idle_wait_and_the_oldest_go_first() -> None:
    async def test() -> None:
        pool = ConnectionPool(ManualClock(), max_idle=2)
        streams = [pair() for _ in range(3)]
        for stream, _ in streams:
            pool.remember(stream, ORIGIN)
            pool.checkin(stream)
        assert pool.idle(ORIGIN) == 2
        assert streams[0][0].closed()
        assert not streams[1][0].closed() and not streams[2][0].closed()

    run(test)


def test_idle_connections_expire_on_the_injected_clock() -> None:
    async def test() -> None:
        clock = ManualClock()
        pool = ConnectionPool(clock, idle_s=30)
        fresh, _a = pair()
        pool.remember(fresh, ORIGIN)
        pool.checkin(fresh)
        clock.advance(29)
        assert pool.checkout(ORIGIN) is fresh
        pool.checkin(fresh)
        clock.advance(30)
        assert pool.checkout(ORIGIN) is None
        assert fresh.closed()

    run(test)


def test_close_closes_every_idle_connection() -> None:
    async def test() -> None:
        pool = ConnectionPool(ManualClock())
        streams = [pair()[0] for _ in range(3)]
        for stream, origin in zip(streams, (ORIGIN, ORIGIN, OTHER), strict=True):
            pool.remember(stream, origin)
            pool.checkin(stream)
        pool.close()
        assert pool.idle() == 0
        assert all(stream.closed() for stream in streams)
        # An answer that ends after the close (shutdown) does not refill it.
        late = pair()[0]
        pool.remember(late, ORIGIN)
        pool.checkin(late)
        assert pool.idle() == 0 and late.closed()

    run(test)
