"""The in-memory layer in front of the strict store: a bounded LRU with two indexes.

Entries are found by ``(scope digest, end digest)`` or by ``(scope digest, tool-call id)``.
At most ``max_entries`` entries and ``max_bytes`` of reasoning text are kept; the least
recently used go first (they stay on disk). Putting an entry replaces whatever held its
end digest, and re-points its tool-call ids to it. No clock: callers pass expiry values.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

DEFAULT_MAX_BYTES: Final = 32 * 1024 * 1024


@dataclass(eq=False)
class CachedReasoning:
    """One restorable reasoning text; ``entry_id`` is its store row (``None``: memory only,
    when the store could not be written). Only ``expires_at`` ever changes (sliding TTL)."""

    entry_id: int | None
    scope_digest: str
    end_digest: str | None
    tool_call_ids: tuple[str, ...]
    provider: str
    model: str
    reasoning: str
    expires_at: float

    @property
    def size(self) -> int:
        return len(self.reasoning.encode("utf-8", "surrogatepass"))


class ReasoningLru:
    def __init__(self, max_entries: int, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, CachedReasoning] = OrderedDict()  # serial → entry
        self._by_end: dict[tuple[str, str], int] = {}
        self._by_call: dict[tuple[str, str], int] = {}
        self._serial = 0
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[CachedReasoning]:
        return iter(list(self._entries.values()))

    def put(self, entry: CachedReasoning) -> None:
        if entry.end_digest is not None:
            self._drop(self._by_end.get((entry.scope_digest, entry.end_digest)))
        self._serial += 1
        serial = self._serial
        self._entries[serial] = entry
        self.bytes += entry.size
        if entry.end_digest is not None:
            self._by_end[entry.scope_digest, entry.end_digest] = serial
        for call_id in entry.tool_call_ids:
            self._by_call[entry.scope_digest, call_id] = serial
        while self._entries and (
            len(self._entries) > self.max_entries or self.bytes > self.max_bytes
        ):
            self._drop(next(iter(self._entries)))

    def by_end(self, scope_digest: str, end_digest: str) -> CachedReasoning | None:
        return self._use(self._by_end.get((scope_digest, end_digest)))

    def by_tool_call(self, scope_digest: str, call_id: str) -> CachedReasoning | None:
        return self._use(self._by_call.get((scope_digest, call_id)))

    def discard(self, entry: CachedReasoning) -> None:
        self._drop(self._serial_of(entry))

    def remove_where(self, predicate: Callable[[CachedReasoning], bool]) -> int:
        doomed = [serial for serial, entry in self._entries.items() if predicate(entry)]
        for serial in doomed:
            self._drop(serial)
        return len(doomed)

    # --- internals ---------------------------------------------------------------------

    def _use(self, serial: int | None) -> CachedReasoning | None:
        if serial is None:
            return None
        self._entries.move_to_end(serial)
        return self._entries[serial]

    def _serial_of(self, entry: CachedReasoning) -> int | None:
        for index, key in self._index_keys(entry):
            serial = index.get(key)
            if serial is not None and self._entries.get(serial) is entry:
                return serial
        return next((s for s, held in self._entries.items() if held is entry), None)

    def _index_keys(
        self, entry: CachedReasoning
    ) -> Iterator[tuple[dict[tuple[str, str], int], tuple[str, str]]]:
        if entry.end_digest is not None:
            yield self._by_end, (entry.scope_digest, entry.end_digest)
        for call_id in entry.tool_call_ids:
            yield self._by_call, (entry.scope_digest, call_id)

    def _drop(self, serial: int | None) -> None:
        if serial is None:
            return
        entry = self._entries.pop(serial, None)
        if entry is None:
            return
        self.bytes -= entry.size
        for index, key in self._index_keys(entry):
            if index.get(key) == serial:
                del index[key]
