"""Remembered canonical renderings of history messages (design §21), pure.

An agent session sends its whole history again on every turn, so nearly every message
:func:`~relay.core.history_digest.history_digests` renders was rendered, identically, on
the turn before. :class:`RenderedMessages` keeps, per message, what the measuring pass
produced for it: its framed canonical text and the nodes it charged (its size is the
text's length less the framing), and for an assistant message its envelope fingerprint
(the hash of that same text under the flag's tag, so a function of the entry). The
history's chain is unchanged: every byte is still hashed into it on every request.

The key is the message as ``marshal`` (version 2) writes it: written from the exact types
only (a ``str``, ``int``, ``dict`` or ``list`` subclass, an enum member, is refused, so
never remembered), each type with its own code (``1``, ``1.0``, ``True`` and ``"1"``
differ, a tuple is not a list, ``-0.0`` is not ``0.0``, NaN is not ``None``), a float as
its 8 bytes, an integer of any size exactly, a dict's members in their order (another
order is another key: a miss) and, unlike versions 3 and 4, no back-references, so equal
values always get the same bytes whatever objects they share. Read back, it is a value of
the same types, equal member by member, so two messages with one key are the same value
type for type, and a rendering depends on nothing else but the
``exclude_reasoning_content`` flag and the limits, which the memo is bound to
(:meth:`RenderedMessages.entries`). The one loss, every buffer (bytes, bytearray, ...)
written alike, changes no rendering: no buffer is canonical, so a message holding one is
refused wherever it is rendered, and never remembered (a ``reasoning_content`` the flag
drops is dropped whatever it holds).

Bounded by bytes (the keys, the texts and a per-entry overhead). An entry makes room for
another only once it has gone :data:`IDLE_CALLS` calls without a hit, least recently used
first; until then a new rendering is not kept. Plain LRU would thrash as soon as the
histories in use outgrow the bound: each request would evict what it is about to look up
(its own oldest messages, remembered one request ago), miss everything and pay the key
on top of the rendering. This way the messages in use stay and a session that ended ages
out; a call that finds no room goes on without the memo (no key for the rest of its
history), so a history longer than the bound keeps its oldest part remembered and costs
what it cost before for the rest.
The owner (``ReplayCache``) calls it from its one thread, the IOLoop's.
"""

from __future__ import annotations

import marshal
from collections import OrderedDict
from typing import Any, Final

from relay.core.limits import CanonicalLimits

# 16 MiB holds the renderings of a 6,400-message Cursor session (issue 29's largest; a key
# and a framed text per distinct message, 6.8 MB each, plus the overhead below), or of
# six 1,000-message ones.
RENDERED_MESSAGES_BYTES: Final = 16 * 1024 * 1024
# Bytes an entry costs besides its key and text: two bytes objects' headers, a list, an
# int and the ordered dict's slot and node (about 250 on CPython 3.11, by tracemalloc).
ENTRY_OVERHEAD: Final = 256
# Calls (requests) an entry must go without a hit before it may be evicted: a handful of
# sessions taking turns keep theirs.
IDLE_CALLS: Final = 16
MARSHAL_VERSION: Final = 2  # the last version without back-references (see above)

# Bytes an assistant entry costs for its envelope fingerprint: a 64-character str.
ENVELOPE_OVERHEAD: Final = 120

# [framed canonical text, nodes charged, the call that last used it, the envelope
# fingerprint of an assistant message (None for any other)]
Rendered = list[Any]


def message_key(message: dict[str, Any]) -> bytes | None:
    """The memo key of a message (see the module's docstring); ``None`` when ``marshal``
    cannot write it (a subclass, a non-builtin type, nesting too deep)."""
    try:
        return marshal.dumps(message, MARSHAL_VERSION)
    except (ValueError, RecursionError):
        return None


class RenderedMessages:
    """Framed canonical texts of messages by :func:`message_key`, for one set of limits
    and one ``exclude_reasoning_content`` flag at a time (another clears it)."""

    __slots__ = ("_bound_to", "_entries", "bytes", "calls", "capacity_bytes", "idle_calls")

    def __init__(
        self, capacity_bytes: int = RENDERED_MESSAGES_BYTES, idle_calls: int = IDLE_CALLS
    ) -> None:
        self.capacity_bytes = capacity_bytes
        self.idle_calls = idle_calls  # 0: plain LRU (tests)
        self.bytes = 0
        self.calls = 0  # calls of entries(): the memo's own clock
        self._entries: OrderedDict[bytes, Rendered] = OrderedDict()
        self._bound_to: tuple[CanonicalLimits, bool] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self, limits: CanonicalLimits, exclude_reasoning_content: bool) -> RenderedMessages:
        """The memo for one more call, bound to these limits and this flag: the renderings
        made under others are dropped first (an owner uses one of each; a change costs
        misses, never a wrong hit)."""
        bound = (limits, exclude_reasoning_content)
        if self._bound_to != bound:
            self._entries.clear()
            self.bytes = 0
            self._bound_to = bound
        self.calls += 1
        return self

    def recall(self, key: bytes) -> Rendered | None:
        """The :data:`Rendered` entry remembered for ``key``, now used by this call."""
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
            found[2] = self.calls
        return found

    def remember(self, key: bytes, framed: bytes, nodes: int, envelope: str | None = None) -> bool:
        """Keep a rendering (and an assistant message's envelope fingerprint, a function of
        the framed text and the bound flag) if it fits, evicting the least recently used
        among the entries idle for ``idle_calls`` calls. ``False`` when it is not kept:
        there is no room (everything else in use) or it is larger than the whole bound."""
        cost = _cost(key, framed, envelope)
        entries = self._entries
        if key in entries:
            return True
        if cost > self.capacity_bytes:
            return False
        while self.bytes + cost > self.capacity_bytes:
            oldest, (old_framed, _, used, old_envelope) = next(iter(entries.items()))
            if self.calls - used < self.idle_calls:
                return False  # everything left is in use
            del entries[oldest]
            self.bytes -= _cost(oldest, old_framed, old_envelope)
        entries[key] = [framed, nodes, self.calls, envelope]
        self.bytes += cost
        return True


def _cost(key: bytes, framed: bytes, envelope: str | None) -> int:
    return len(key) + len(framed) + ENTRY_OVERHEAD + (ENVELOPE_OVERHEAD if envelope else 0)
