"""Writing to the client: awaited flushes with a per-write deadline, SSE keepalives.

A write that the client does not drain within the deadline closes the connection: a
stalled reader must not pin an upstream generation forever. Once the generation has
completed, :meth:`Downstream.start_delivery` also bounds the whole remaining delivery by
a fixed deadline, so a client that drains just fast enough cannot stretch it forever.
Keepalive comments fill downstream silence; they renew no upstream deadline and never
reach assistant output.
"""

from __future__ import annotations

from asyncio import Future
from collections.abc import Callable

from tornado.ioloop import IOLoop
from tornado.iostream import StreamClosedError
from tornado.web import RequestHandler

from relay.clock import Clock, Deadline
from relay.transport.upstream import ClientGone


class Downstream:
    def __init__(
        self,
        handler: RequestHandler,
        clock: Clock,
        *,
        write_timeout_s: float,
        keepalive_s: float,
        keepalive_frame: bytes,
        tap: Callable[[bytes], None] | None = None,  # sees every queued frame (LOG_BODIES)
    ) -> None:
        self._handler = handler
        self._clock = clock
        self._write_timeout_s = write_timeout_s
        self._keepalive_s = keepalive_s
        self._keepalive_frame = keepalive_frame
        self._tap = tap
        self._keepalive_handle: object | None = None
        self._last_write = clock.monotonic()
        self._writing = False
        self._pending = 0
        self.closed = False
        self.frames_sent = 0
        self._delivery_ends: float | None = None

    def start_delivery(self, seconds: float) -> None:
        """The generation is complete: everything left must reach the client in ``seconds``."""
        if self._delivery_ends is None:
            self._delivery_ends = self._clock.monotonic() + seconds

    def queue(self, data: bytes) -> None:
        """Buffer one complete frame; :meth:`drain` sends it."""
        if self.closed:
            raise ClientGone
        self._handler.write(data)
        self._pending += 1
        if self._tap is not None:
            self._tap(data)

    async def send(self, data: bytes) -> None:
        """Write one complete frame and wait until the client has taken it."""
        self.queue(data)
        await self.drain()

    async def drain(self) -> None:
        """Flush queued frames and wait, within the write deadline, until the client took them."""
        if self._pending == 0:
            return
        if self.closed:
            raise ClientGone
        self._writing = True
        try:
            flushed = self._handler.flush()
            if flushed.done():
                # The socket took it at once (the common case): no wait to bound, so no
                # timer is armed and cancelled per frame. Raises what the flush met.
                flushed.result()
            else:
                await self._within_deadline(flushed)
        except StreamClosedError:
            self.closed = True
            raise ClientGone from None
        finally:
            self._writing = False
        self.frames_sent += self._pending
        self._pending = 0
        self._last_write = self._clock.monotonic()

    async def _within_deadline(self, flushed: Future[None]) -> None:
        """Wait for ``flushed`` within the write deadline (and what is left of the
        delivery's); past it the connection is closed and the client counts as gone."""
        timeout = self._write_timeout_s
        if self._delivery_ends is not None:
            timeout = min(timeout, max(0.0, self._delivery_ends - self._clock.monotonic()))
        deadline = Deadline(self._clock, timeout, self._on_write_timeout)
        try:
            await flushed
        finally:
            deadline.stop()
        if deadline.expired:
            self.closed = True
            raise ClientGone

    def _on_write_timeout(self) -> None:
        self.closed = True
        # Closing the socket makes the pending flush fail with StreamClosedError.
        connection = self._handler.request.connection
        stream = getattr(connection, "stream", None)
        if stream is not None:
            stream.close()

    def start_keepalive(self) -> None:
        if self._keepalive_s > 0 and self._keepalive_handle is None:
            self._schedule_keepalive(self._keepalive_s)

    def stop_keepalive(self) -> None:
        if self._keepalive_handle is not None:
            IOLoop.current().remove_timeout(self._keepalive_handle)
            self._keepalive_handle = None

    def _schedule_keepalive(self, delay: float) -> None:
        self._keepalive_handle = IOLoop.current().call_later(max(delay, 0.005), self._keepalive)

    def _keepalive(self) -> None:
        self._keepalive_handle = None
        if self.closed:
            return
        idle = self._clock.monotonic() - self._last_write
        if idle >= self._keepalive_s and not self._writing:
            # Fire-and-forget: a stalled client is caught by the next real write's deadline.
            self._handler.write(self._keepalive_frame)
            # Nobody awaits this flush; retrieve its error so it is not logged as lost.
            self._handler.flush().add_done_callback(lambda f: f.exception())
            self._last_write = self._clock.monotonic()
            idle = 0.0
        self._schedule_keepalive(self._keepalive_s - idle)
