"""Token accounting in the running relay: counters since start (for ``/metrics``), and the
hourly diagnostics database written off the request path.

The request path only adds to an in-memory :class:`~relay.core.token_usage.HourDelta`
(a dict update: no I/O). Every ``flush_every_s`` a timer on the loop swaps that delta out
and writes it to :class:`~relay.storage.stats_db.StatsDB` on a worker thread; the
replay cache's rejection and fence counters are sampled then too (their growth is the
hour's count), so nothing in the cache needs to know this module exists. The pending
delta is bounded by its labels (shapes, bounded model labels, outcomes, reason codes,
latency buckets) times the hours one interval spans. A failed write drops that delta and
is logged once (a warning; later failures stay quiet until a write succeeds again): the
database is diagnostics, never a reason to fail a request.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from relay.clock import Clock
from relay.core import token_usage as tu
from relay.observability import log
from relay.storage.stats_db import StatsDB

if TYPE_CHECKING:
    from relay.app.runtime import Runtime

DAY_HOURS: Final = 24
WINDOWS: Final = (("lastHour", 1), ("lastDay", 24), ("last30Days", 30 * 24))
FLUSH_EVERY_S: Final = 60.0
# Counter snapshots sampled at flush time: {(kind, reason): total since start}.
CounterSource = Callable[[], Mapping[tuple[str, str], int]]


class TokenAccounting:
    def __init__(
        self,
        clock: Clock,
        db: StatsDB | None,
        *,
        retention_days: int,
        counters: CounterSource | None = None,
        prices: Mapping[str, tu.Price] | None = None,
        flush_every_s: float = FLUSH_EVERY_S,
    ) -> None:
        self.clock = clock
        self.db = db
        self.retention_days = retention_days
        self.prices = dict(prices or {})
        self.flush_every_s = flush_every_s
        self._counters = counters
        self._counted: dict[tuple[str, str], int] = {}
        self.since_start = tu.Tallies()  # hour 0: one row per (shape, model, outcome)
        self.latency_since_start: Counter[int] = Counter()
        self.latency_sum_s = 0.0
        self._pending = tu.HourDelta()
        # Without a database, the recent hours stay in memory (pruned to the longest window).
        self._memory: tu.HourDelta | None = tu.HourDelta() if db is None else None
        self._models: set[str] = set()
        self._failing = False
        self._flushing: asyncio.Future[None] | None = None
        self._in_flight: tu.HourDelta | None = None  # being written: still counted by recent()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last_prune_hour: int | None = None

    @classmethod
    def open(
        cls,
        clock: Clock,
        store_path: Path,
        *,
        retention_days: int,
        counters: CounterSource | None = None,
        prices: Mapping[str, tu.Price] | None = None,
    ) -> TokenAccounting:
        """Beside the store; ``retention_days`` 0 keeps nothing on disk. A database that
        cannot be opened is logged and the accounting runs in memory."""
        db: StatsDB | None = None
        if retention_days > 0:
            try:
                db = StatsDB.beside(store_path)
            except (sqlite3.Error, OSError) as err:
                log.event("stats_db_unavailable", logging.WARNING, error=type(err).__name__,
                          path=str(store_path.parent / "relay-stats.sqlite"))  # fmt: skip
        return cls(clock, db, retention_days=retention_days, counters=counters, prices=prices)

    # --- the request path: in memory only ----------------------------------------------

    def answered(self, shape: str, model: Any, header: str | None, usage: tu.Usage | None) -> None:
        """One relayed request finished: count it against its replay outcome."""
        outcome, blocks = tu.classify(header)
        label = tu.model_label(model, self._models)
        shape = shape if shape in ("chat", "responses") else tu.OTHER
        tally = tu.Tally.of(usage, blocks)
        hour = tu.hour_of(self.clock.wall())
        self.since_start.add(tu.Key(0, shape, label, outcome.value), tally)
        self._pending.tallies.add(tu.Key(hour, shape, label, outcome.value), tally)

    def added_latency(self, seconds: float) -> None:
        """The relay's own share of one request's time to first byte."""
        bound = tu.latency_bucket(seconds)
        self.latency_since_start[bound] += 1
        self.latency_sum_s += max(0.0, seconds)
        self._pending.latency[tu.hour_of(self.clock.wall()), bound] += 1

    # --- sampling and flushing (the loop's timer) ---------------------------------------

    def sample_counters(self) -> None:
        """Attribute the growth of the cache's rejection and fence counters to this hour."""
        if self._counters is None:
            return
        hour = tu.hour_of(self.clock.wall())
        for key, total in self._counters().items():
            grown = total - self._counted.get(key, 0)
            if grown > 0:
                self._pending.events[hour, *key] += grown
            self._counted[key] = total

    def take_pending(self) -> tu.HourDelta:
        self.sample_counters()
        pending, self._pending = self._pending, tu.HourDelta()
        return pending

    def write(self, delta: tu.HourDelta) -> None:
        """Write ``delta`` (and prune once an hour). On a worker thread, or at shutdown."""
        if self.db is None:
            return
        now_hour = tu.hour_of(self.clock.wall())
        try:
            if not delta.empty():
                self.db.add(delta)
            if self._last_prune_hour != now_hour:
                self.db.prune(now_hour - self.retention_days * DAY_HOURS * tu.HOUR_S)
                self._last_prune_hour = now_hour
        except (sqlite3.Error, OSError) as err:
            if not self._failing:
                log.event("stats_write_failed", logging.WARNING, error=type(err).__name__,
                          detail=str(err)[:200], path=str(self.db.path))  # fmt: skip
            self._failing = True
            return
        if self._failing:
            log.event("stats_write_recovered", path=str(self.db.path))
        self._failing = False

    def flush_now(self) -> None:
        """Synchronously: take what is pending and write it (tests, shutdown)."""
        delta = self.take_pending()
        if self._memory is not None:
            self._memory.merge(delta)
            self._prune_memory()
            return
        self.write(delta)

    def start(self) -> None:
        """Flush every ``flush_every_s`` on the running loop (asyncio's monotonic timer)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._timer = self._loop.call_later(self.flush_every_s, self._tick)

    def _tick(self) -> None:
        loop = self._loop
        if loop is None:
            return
        self._timer = loop.call_later(self.flush_every_s, self._tick)
        if self._flushing is not None and not self._flushing.done():
            return  # the previous write is still running: this delta waits for the next
        if self._memory is not None:
            self.flush_now()
            return
        delta = self._in_flight = self.take_pending()
        self._flushing = loop.run_in_executor(None, self.write, delta)
        self._flushing.add_done_callback(self._written)

    def _written(self, _: asyncio.Future[None]) -> None:
        self._in_flight = None

    async def stop(self) -> None:
        """Stop the timer, wait for a write in flight, write the rest, close."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop = None
        if self._flushing is not None:
            await asyncio.shield(self._flushing)
        self.flush_now()
        if self.db is not None:
            self.db.close()

    # --- reading ------------------------------------------------------------------------

    def recent(self, hours: int) -> tu.HourDelta:
        """The last ``hours`` hours (the current one included): stored plus pending."""
        self.sample_counters()  # the cache's latest rejections and fences count too
        since = tu.hour_of(self.clock.wall()) - (hours - 1) * tu.HOUR_S
        out = tu.HourDelta()
        if self.db is not None:
            try:
                out.merge(self.db.since(since))
            except (sqlite3.Error, OSError) as err:
                log.event("stats_read_failed", logging.WARNING, error=type(err).__name__)
        elif self._memory is not None:
            out.merge(_since(self._memory, since))
        pending = tu.HourDelta()
        pending.merge(self._pending)
        if self._in_flight is not None:
            pending.merge(self._in_flight)
        out.merge(_since(pending, since))
        return out

    def _prune_memory(self) -> None:
        assert self._memory is not None
        longest = max(hours for _, hours in WINDOWS)
        self._memory = _since(self._memory, tu.hour_of(self.clock.wall()) - longest * tu.HOUR_S)

    def report(self) -> dict[str, Any]:
        """``relay status``'s "what replay buys": one entry per window."""
        month = self.recent(max(hours for _, hours in WINDOWS))
        now_hour = tu.hour_of(self.clock.wall())
        out: dict[str, Any] = {"pricesConfigured": sorted(self.prices)}
        for name, hours in WINDOWS:
            since = now_hour - (hours - 1) * tu.HOUR_S
            delta = _since(month, since)
            rows = list(delta.tallies.by_key.items())
            window = tu.summarize(rows).to_json()
            events: dict[str, dict[str, int]] = {}
            for (_, kind, reason), n in sorted(delta.events.items()):
                events.setdefault(kind, {})
                events[kind][reason] = events[kind].get(reason, 0) + n
            window["events"] = events
            latency: Counter[int] = Counter()
            for (_, bound), n in delta.latency.items():
                latency[bound] += n
            window["addedLatency"] = tu.latency_summary(latency)
            window["estimate"] = tu.estimate(rows, self.prices) if self.prices else None
            out[name] = window
        return out


def token_accounting(runtime: Runtime) -> TokenAccounting | None:
    """The runtime's token accounting as operations made it (``None`` before start): the
    runtime knows it only as what the request shell records (``TokenRecorder``)."""
    tokens = runtime.tokens
    assert tokens is None or isinstance(tokens, TokenAccounting)
    return tokens


def _since(delta: tu.HourDelta, hour: int) -> tu.HourDelta:
    out = tu.HourDelta()
    out.tallies = delta.tallies.since(hour)
    out.events = Counter({k: n for k, n in delta.events.items() if k[0] >= hour})
    out.latency = Counter({k: n for k, n in delta.latency.items() if k[0] >= hour})
    return out
