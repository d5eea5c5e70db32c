"""The bounded hot cache of verified replay blocks (spec §6).

Cursor sends the whole conversation again every turn, so a plan is mostly the previous
request's plan again. What checking a stored payload finds (its parsed items, its calls,
its item ids) depends only on its bytes; it is kept here by observation id (never reused:
the ids are AUTOINCREMENT), so the next plan skips hashing and parsing those bytes again.

The planner still reads every payload row it replays, in every plan: an entry is used
only when the record read in that plan names the same output hash and the row's text is
still exactly the text the entry was verified from (one string comparison), so a payload
damaged on disk is refused as before, and retention is checked on the row as for any
payload. Everything that depends on the request (positions, call pairing, markers,
intents, generation, snapshot) is checked every time, hot or not. Entries hold immutable
objects only (the text, :class:`FrozenDict` and tuples), so no request can change what
the next one replays. The cache is bounded by serialized payload bytes
(``CacheBudget.hot_cache_bytes``) and evicts the least recently used; eviction changes no
durable knowledge: a miss verifies the row again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final, NoReturn


class FrozenDict(dict[str, Any]):
    """A JSON object no one can change: shared by every plan that replays it. ``dict``
    underneath, so JSON encoders write it as they write any object."""

    __slots__ = ()

    def _immutable(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("a verified replay item is immutable; copy it to change it")

    __setitem__ = __delitem__ = __ior__ = _immutable
    clear = pop = popitem = setdefault = update = _immutable


_CONTAINERS: Final = (dict, list)


def freeze(value: Any) -> Any:
    """``value`` (parsed JSON) with every object a :class:`FrozenDict` and every array a
    tuple: equal in JSON, immutable in Python. (Scalars are not passed down: most members
    are strings, and a call per member would cost more than the copy.)"""
    kind = type(value)
    if kind is dict:
        return FrozenDict({k: freeze(v) if type(v) in _CONTAINERS else v for k, v in value.items()})
    if kind is list:
        return tuple([freeze(v) if type(v) in _CONTAINERS else v for v in value])
    return value


@dataclass(frozen=True, slots=True)
class VerifiedPayload:
    """A stored payload that passed every check that depends only on its bytes."""

    text: str  # the stored payload it was verified from
    output_hash: str  # SHA-256 of that text's UTF-8 bytes
    size: int  # those bytes
    items: tuple[FrozenDict, ...]  # the original output items
    calls: tuple[tuple[Any, Any], ...]  # (call_id, name) of each function call, in order
    item_keys: tuple[tuple[str, str], ...]  # ("id" | "call_id", value) of every item


class HotBlocks:
    """Verified payloads by observation id, least recently used first out."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.bytes = 0
        self.hits = 0
        self._entries: OrderedDict[int, VerifiedPayload] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, observation_id: int, output_hash: str, text: str) -> VerifiedPayload | None:
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
