"""A job the cache shell runs every few seconds or hours on the IOLoop (retention cleanup,
the shared store's lease heartbeat). Scheduled with asyncio's ``call_later``, whose clock
is monotonic: Tornado's ``PeriodicCallback`` follows ``time.time()``, so a wall clock
stepped back two days would stall it for two days."""

from __future__ import annotations

import asyncio


class Periodic:
    """Mixin: :meth:`tick` every :meth:`interval_s` seconds between :meth:`start` and
    :meth:`stop` (a tick that raises still schedules the next one)."""

    _timer: asyncio.TimerHandle | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    def interval_s(self) -> float:
        raise NotImplementedError

    def tick(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        """Run every :meth:`interval_s` on the running event loop (call from it)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._timer = self._loop.call_later(self.interval_s(), self._tick)

    def _tick(self) -> None:
        try:
            self.tick()
        finally:
            if self._loop is not None:  # not stopped meanwhile
                self._timer = self._loop.call_later(self.interval_s(), self._tick)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop = None
