"""The bounded hot cache of verified replay blocks (design §6).

Cursor sends the whole conversation again every turn, so a plan is mostly the previous
request's plan again. What checking a stored payload finds (that its bytes match the
record's hash and hold a well-formed block, its calls, its item ids) depends only on its
bytes; it is kept here by observation id (never reused: the ids are AUTOINCREMENT), so
the next plan skips hashing and parsing those bytes again.

The planner still reads every payload row it replays, in every plan: an entry is used
only when the record read in that plan names the same output hash and the row's text is
still exactly the bytes the entry was verified from (one comparison), so a payload
damaged on disk is refused as before, and retention is checked on the row as for any
payload. Everything that depends on the request (positions, call pairing, markers,
intents, generation, snapshot) is checked every time, hot or not. Entries hold immutable
objects only (strings and tuples of them), and what is replayed is the verified text
itself (:class:`relay.core.json_bytes.RawItems`), so no request can change what
the next one replays. The cache is bounded by serialized payload bytes
(``CacheBudget.hot_cache_bytes``) and evicts the least recently used; eviction changes no
durable knowledge: a miss verifies the row again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from relay.core.json_bytes import RawItems


@dataclass(frozen=True, slots=True)
class VerifiedPayload:
    """A stored payload that passed every check that depends only on its bytes."""

    text: bytes  # the stored payload (UTF-8) it was verified from: what is replayed, verbatim
    output_hash: str  # SHA-256 of those bytes
    size: int  # len(text)
    calls: tuple[tuple[Any, ...], ...]  # (kind, call_id, name) of each tool call, in order
    item_keys: tuple[tuple[str, str], ...]  # ("id" | "call_id", value) of every item
    # ``text``'s items, located once with its verification (the planner sets it): each
    # replay splices this view instead of scanning the text again (design §21).
    items: RawItems | None = field(default=None, compare=False, repr=False)


class HotBlocks:
    """Verified payloads by observation id, least recently used first out."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.bytes = 0
        self.hits = 0
        self._entries: OrderedDict[int, VerifiedPayload] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, observation_id: int, output_hash: str, text: bytes) -> VerifiedPayload | None:
        """The entry of this record if it was verified from this very ``text`` (as read
        now) under this ``output_hash`` (as the record read now names it)."""
        entry = self._entries.get(observation_id)
        if entry is None:
            return None
        if entry.output_hash != output_hash or entry.text != text:
            self._drop(observation_id)  # the row changed: verify it again
            return None
        self._entries.move_to_end(observation_id)
        self.hits += 1
        return entry

    def put(self, observation_id: int, payload: VerifiedPayload) -> None:
        if observation_id in self._entries:
            self._drop(observation_id)
        if payload.size > self.capacity_bytes:
            return
        self._entries[observation_id] = payload
        self.bytes += payload.size
        while self.bytes > self.capacity_bytes:
            oldest = next(iter(self._entries))
            self._drop(oldest)

    def _drop(self, observation_id: int) -> None:
        self.bytes -= self._entries.pop(observation_id).size
