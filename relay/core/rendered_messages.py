"""Remembered canonical renderings of history messages (design §21), pure.

An agent session sends its whole history again on every turn, so nearly every message
:func:`~relay.core.history_digest.history_digests` renders was rendered, identically, on
the turn before. :class:`RenderedMessages` keeps, per message, what the measuring pass
produced for it: its framed canonical text and the nodes it charged (its size is the
text's length less the framing). Hashing is unchanged: every byte is still hashed on
every request.

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

Bounded by bytes (the keys, the texts and a per-entry overhead), least recently used out.
The owner (``ReplayCache``) calls it from its one thread, the IOLoop's.
"""

from __future__ import annotations

import marshal
from collections import OrderedDict
from typing import Any, Final

from relay.core.limits import CanonicalLimits

# 8 MiB holds about three 1,000-message Cursor sessions (a key and a framed text per
# message, 1.1 MB each, plus the overhead below): a session's previous turn is always
# there while a few run at once. A history longer than the bound misses every time (each
# request evicts what the next one looks up first) and costs what it cost before, plus
# a key per message.
RENDERED_MESSAGES_BYTES: Final = 8 * 1024 * 1024
# Bytes an entry costs besides its key and text: two bytes objects' headers, a tuple, an
# int and the ordered dict's slot and node (about 230 on CPython 3.11, by tracemalloc).
ENTRY_OVERHEAD: Final = 240
MARSHAL_VERSION: Final = 2  # the last version without back-references (see above)

Rendered = tuple[bytes, int]  # (framed canonical text, nodes charged)


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

    __slots__ = ("_bound_to", "_entries", "bytes", "capacity_bytes")

    def __init__(self, capacity_bytes: int = RENDERED_MESSAGES_BYTES) -> None:
        self.capacity_bytes = capacity_bytes
        self.bytes = 0
        self._entries: OrderedDict[bytes, Rendered] = OrderedDict()
        self._bound_to: tuple[CanonicalLimits, bool] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self, limits: CanonicalLimits, exclude_reasoning_content: bool) -> RenderedMessages:
        """The memo, bound to these limits and this flag: the renderings made under others
        are dropped first (an owner uses one of each; a change costs misses, never a wrong
        hit)."""
        bound = (limits, exclude_reasoning_content)
        if self._bound_to != bound:
            self._entries.clear()
            self.bytes = 0
            self._bound_to = bound
        return self

    def recall(self, key: bytes) -> Rendered | None:
        """The rendering remembered for ``key``, now the most recently used."""
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
        return found

    def remember(self, key: bytes, framed: bytes, nodes: int) -> None:
        """Keep a rendering, evicting the least recently used past the bound (one larger
        than the whole bound is not kept)."""
        cost = len(key) + len(framed) + ENTRY_OVERHEAD
        if cost > self.capacity_bytes or key in self._entries:
            return
        self._entries[key] = (framed, nodes)
        self.bytes += cost
        while self.bytes > self.capacity_bytes:
            old_key, (old_framed, _) = self._entries.popitem(last=False)
            self.bytes -= len(old_key) + len(old_framed) + ENTRY_OVERHEAD
