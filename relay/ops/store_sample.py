"""The store's aggregates, read at most once per five seconds (design §18).

Polling status or scraping /metrics in a loop costs one bounded scan per TTL, not one per
poll. Time is the injected clock's monotonic time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from relay.clock import Clock
from relay.storage.aggregates import DEFAULT_SCAN_ROWS, StoreAggregates
from relay.storage.interface import StoreDiagnostics

TTL_S: Final = 5.0


@dataclass(frozen=True)
class Sample:
    aggregates: StoreAggregates
    sampled_wall: float  # when it was read
    age_s: float  # how old it is now


class StoreSampler:
    def __init__(
        self, store: StoreDiagnostics | None, clock: Clock, *, scan_rows: int = DEFAULT_SCAN_ROWS
    ) -> None:
        self.store = store
        self.clock = clock
        self.scan_rows = scan_rows
        self.reads = 0  # scans actually run (the TTL's effect, for tests)
        self._cached: tuple[float, float, StoreAggregates] | None = None

    def sample(self) -> Sample | None:
        """The cached aggregates, read again once older than the TTL; ``None`` without a
        store. Raises ``StoreError`` when the read fails."""
        if self.store is None:
            return None
        now = self.clock.monotonic()
        if self._cached is None or now - self._cached[0] >= TTL_S:
            aggregates = self.store.aggregates(scan_rows=self.scan_rows)
            self.reads += 1
            self._cached = (now, self.clock.wall(), aggregates)
        at, wall, aggregates = self._cached
        return Sample(aggregates, wall, now - at)
