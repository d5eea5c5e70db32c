"""Canonical JSON: the exact bytes the visible-history identity hashes (pure, bounded).

The format (part of ``IDENTITY_FORMAT_VERSION``):

- ASCII-only JSON text with no insignificant whitespace (separators ``,`` and ``:``).
- Object members sorted by the code points of their keys; array order kept.
- Strings keep printable ASCII (U+0020..U+007E) raw except ``"`` and ``\\``, which become
  ``\\"`` and ``\\\\``; U+0008, U+000C, U+000A, U+000D, U+0009 become ``\\b \\f \\n \\r
  \\t``; every other code point becomes ``\\uxxxx`` (lowercase hex), beyond U+FFFF as a
  UTF-16 surrogate pair, and a lone surrogate as its own escape. This is exactly
  ``json.dumps(ensure_ascii=True)``: the stdlib's fastest encoder, and no code point (not
  even a lone surrogate) needs a special case. Non-ASCII text costs 6 bytes a code point
  (12 beyond the BMP) of the byte budget; that is deterministic, so it is fine.
- Integers in decimal; floats as ``float.__repr__`` (shortest round trip: ``1.0``,
  ``1e+16``, ``-0.0``); ``true``, ``false``, ``null``. NaN and infinities are refused.
- Only ``dict`` (string keys), ``list``/``tuple``, ``str``, ``int``, ``float``, ``bool`` and
  ``None`` are canonical; anything else is refused.

Bounded: :meth:`Budget.measure` walks a value first (exact byte size, node count, depth)
and refuses before a byte is emitted; :func:`chunks` then emits the measured value in
pieces of at most ``CHUNK_BYTES``, so no canonical text longer than one chunk ever exists.

:meth:`Budget.render` is the one-pass form for documents that fit in one chunk: it
measures *by rendering* (the text's length is its size) and keeps the bytes, as a
:class:`Rendered`, for :func:`frame` to emit later, so a document is escaped once, not
measured and then escaped again. It renders only what is provably at most one chunk
(every code point escapes to at most 12 bytes, 6 for ASCII text) and charges the budget
with the same sizes, node counts and depths as :meth:`Budget.measure`; whatever it cannot
decide that way (a limit reached, a value outside the fast shapes) goes through
:meth:`Budget.measure`, so refusals are exactly the ones ``measure`` gives. A caller that
renders a whole history before emitting holds at most the history's canonical bytes,
which the byte limit bounds.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from typing import Any, Final, Protocol

from relay.reasoning.limits import CANONICAL_LIMITS, CHUNK_BYTES, CanonicalLimits

# The C-accelerated stdlib string escaper: the string rule above, quotes included.
_escape = json.encoder.encode_basestring_ascii
# One C call per small document. sort_keys sorts by code point, as the format says;
# check_circular is off because no cycle gets here (measuring refuses it by depth).
_ENCODER: Final = json.JSONEncoder(
    ensure_ascii=True, allow_nan=False, sort_keys=True, separators=(",", ":"),
    check_circular=False,
)  # fmt: skip
# Emission escapes long strings slice by slice; at most 12 bytes per code point keeps
# every piece under CHUNK_BYTES.
_SLICE: Final = 4096
# Measuring slices long strings too, only to bound its temporaries.
_MEASURE_SLICE: Final = 65536
_SHORT: Final = 256  # below this, one escape call beats counting
_U64: Final = struct.Struct(">Q")


def _c_encode() -> Callable[[Any, int], Any] | None:
    # The C encoder _ENCODER.encode builds on each call, built once (its configuration is
    # fixed). None when the interpreter has no C accelerator.
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    encoder: Callable[[Any, int], Any] = make(
        None, _ENCODER.default, _escape, None, ":", ",", True, False, False
    )
    return encoder


_C_ENCODE: Final = _c_encode()


def _encode(value: object) -> str:
    """The canonical text of a measured value in one call (exactly ``_ENCODER.encode``)."""
    if _C_ENCODE is None:
        return _ENCODER.encode(value)
    return "".join(_C_ENCODE(value, 0))


# Escaped, a code point takes at most 12 bytes (a surrogate pair), an ASCII one at most 6.
MAX_ESCAPE: Final = 12
MAX_ASCII_ESCAPE: Final = 6
escape = _escape  # one string's canonical text, quotes included (for one-pass renderers)
_ONLY_STR: Final = frozenset((str,))
_MAX_PLANS: Final = 64  # flat templates one Budget keeps (distinct key sets)


def _weights() -> bytes:
    table = bytearray(256)  # printable ASCII adds nothing
    for byte in (*range(0x20), 0x7F):
        table[byte] = 5  # \u00xx: six bytes for one
    for byte in b'"\\\b\f\n\r\t':
        table[byte] = 1  # two-byte escapes
    return bytes(table)


# Escape weights of ASCII bytes: an ASCII string's escaped size is its length plus the
# weights of its bytes, counted with C-speed translate/count at about twice the speed of
# escaping it (measuring must not cost a second emission).
_WEIGHTS: Final = _weights()


class CanonicalRefused(Exception):
    """A deterministic refusal: the same value always gets it, so callers skip caching
    without an intent or a marker. Not a ``RelayError``: the request itself is fine."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CanonicalLimitExceeded(CanonicalRefused):
    """Over a canonical limit; ``reason`` is ``bytes``, ``messages``, ``nodes`` or ``depth``."""


class NotCanonicalizable(CanonicalRefused):
    """A value JSON cannot carry exactly; ``reason`` is ``number``, ``key`` or ``type``."""


class Sink(Protocol):
    """Where emitted bytes go (a hashlib object)."""

    def update(self, data: bytes, /) -> None: ...


# --- measuring -----------------------------------------------------------------------


def _str_size(text: str, budget: Budget) -> int:
    if len(text) < _SHORT:
        return len(_escape(text))
    if len(text) > budget.room:  # never shorter escaped than raw: refuse without work
        raise CanonicalLimitExceeded("bytes")
    size = 2
    for start in range(0, len(text), _MEASURE_SLICE):
        piece = text[start : start + _MEASURE_SLICE]
        if piece.isascii():
            weights = piece.encode("ascii").translate(_WEIGHTS)
            size += len(piece) + weights.count(1) + 5 * weights.count(5)
        else:
            size += len(_escape(piece)) - 2
    return size


def _scalar_size(value: Any) -> int:
    kind = type(value)
    if value is None or value is True:
        return 4
    if value is False:
        return 5
    if kind is int:
        try:
            return len(int.__repr__(value))
        except ValueError:  # beyond the interpreter's int-to-str digit limit
            raise NotCanonicalizable("number") from None
    if kind is float:
        if not math.isfinite(value):
            raise NotCanonicalizable("number")
        return len(float.__repr__(value))
    raise NotCanonicalizable("type")


def _size(value: Any, depth: int, budget: Budget) -> int:
    """Exact canonical size of ``value``, whose own node is already counted."""
    kind = type(value)
    if kind is str:
        return _str_size(value, budget)
    if kind is not dict and kind is not list and kind is not tuple:
        return _scalar_size(value)
    depth += 1
    if depth > budget.limits.max_depth:
        raise CanonicalLimitExceeded("depth")
    budget.nodes += len(value)  # counted before any child is visited: bounds the walk
    if budget.nodes > budget.limits.max_nodes:
        raise CanonicalLimitExceeded("nodes")
    size = len(value) + 1 if value else 2  # brackets and commas
    if kind is dict:
        known = budget.key_sizes
        for key, item in value.items():
            if type(key) is not str:  # before the cache: a str subclass equal to a seen key
                raise NotCanonicalizable("key")  # is still not a canonical key
            key_size = known.get(key)
            if key_size is None:  # keys repeat across messages: measure each one once
                key_size = _str_size(key, budget)
                if len(key) < _SHORT:
                    known[key] = key_size
            size += key_size + 1
            # Most nodes are strings: skip a call level for them.
            size += _str_size(item, budget) if type(item) is str else _size(item, depth, budget)
    else:
        for item in value:
            size += _str_size(item, budget) if type(item) is str else _size(item, depth, budget)
    return size


class Budget:
    """Charges documents against one set of limits (mutable; one per identity computation).

    Scope and history share it, so their bytes and nodes count together.
    """

    __slots__ = ("bytes", "key_sizes", "limits", "nodes", "plans", "room")

    def __init__(
        self,
        limits: CanonicalLimits = CANONICAL_LIMITS,
        *,
        bytes_used: int = 0,
        nodes_used: int = 0,
    ) -> None:
        self.limits = limits
        self.bytes = bytes_used
        self.nodes = nodes_used
        self.room = limits.max_bytes - bytes_used  # bytes left for the document being measured
        self.key_sizes: dict[str, int] = {}
        self.plans: dict[tuple[str, ...], _FlatPlan] = {}  # render()'s flat templates

    def measure(self, value: object) -> int:
        """Return the exact canonical byte size of ``value`` and charge it to the budget.

        Raises :class:`CanonicalRefused` (the budget is then spent) before anything is
        emitted when the value, added to what was charged before, breaks a limit.
        """
        self.room = self.limits.max_bytes - self.bytes
        self.nodes += 1
        if self.nodes > self.limits.max_nodes:
            raise CanonicalLimitExceeded("nodes")
        size = _size(value, 0, self)
        self.bytes += size
        if self.bytes > self.limits.max_bytes:
            raise CanonicalLimitExceeded("bytes")
        return size

    def admit(self, size: int, nodes: int, depth: int) -> bool:
        """Charge a document measured another way: ``size`` canonical bytes, ``nodes``
        values (itself included), ``depth`` levels of container nesting, all exactly as
        :meth:`measure` would count them. ``False``, charging nothing, when that breaks a
        limit: then :meth:`measure` the document for the exact refusal."""
        limits = self.limits
        if (
            depth > limits.max_depth
            or self.nodes + nodes > limits.max_nodes
            or self.bytes + size > limits.max_bytes
        ):
            return False
        self.nodes += nodes
        self.bytes += size
        return True

    def render(self, value: object) -> tuple[int, object]:
        """Measure ``value`` like :meth:`measure` (same size, charges and refusals) and
        return ``(size, document)`` for :func:`frame`: the value rendered once into a
        :class:`Rendered` when it fits in one chunk, else the value itself (streamed)."""
        if type(value) is dict:
            text = _render_flat(value, self.plans)
            if text is not None and self.admit(len(text), len(value) + 1, 1):
                return len(text), Rendered(text)
        size = self.measure(value)
        if size <= CHUNK_BYTES:
            return size, Rendered(_encode(value))
        return size, value


class Rendered:
    """A document rendered while it was measured, as :func:`frame` emits it: the u64
    big-endian length, then the canonical text (at most ``CHUNK_BYTES``), in one piece."""

    __slots__ = ("framed",)

    def __init__(self, text: str) -> None:
        self.framed = _U64.pack(len(text)) + text.encode("ascii")


def fits_one_chunk(chars: int, fixed: int, texts: Sequence[str]) -> bool:
    """Whether strings of ``chars`` code points in all (``texts``), escaped, plus ``fixed``
    bytes of literal text are provably at most one chunk: decided from lengths (and
    ASCII-ness, O(1) per string) alone, before anything is escaped."""
    if MAX_ESCAPE * chars + fixed <= CHUNK_BYTES:
        return True
    return MAX_ASCII_ESCAPE * chars + fixed <= CHUNK_BYTES and all(map(str.isascii, texts))


# --- one-pass rendering of flat objects ------------------------------------------------
# A dict whose keys and values are all strings (user, system and tool messages) is
# rendered from a template per key set: its keys in code-point order, escaped once.


class _FlatPlan:
    __slots__ = ("fixed", "get", "small", "template")

    def __init__(self, keys: tuple[str, ...]) -> None:
        order = sorted(keys)
        members = ",".join(_escape(key).replace("%", "%%") + ":%s" for key in order)
        self.template = "{" + members + "}"
        # Bytes of the rendered text besides the values' escaped code points: braces,
        # commas, colons, keys and the values' quotes.
        self.fixed = sum(len(_escape(key)) + 4 for key in order) + 1
        # Values of at most this many code points in all fit one chunk, whatever they hold.
        self.small = (CHUNK_BYTES - self.fixed) // MAX_ESCAPE
        getter = itemgetter(*order)
        self.get: Callable[[dict[str, Any]], tuple[Any, ...]] = (
            getter if len(order) > 1 else lambda value: (getter(value),)
        )


def _render_flat(value: dict[Any, Any], plans: dict[tuple[str, ...], _FlatPlan]) -> str | None:
    """The canonical text of a non-empty dict of strings that fits one chunk, or ``None``.

    ``plans`` caches templates by key tuple (one cache per Budget: no shared state)."""
    keys = tuple(value)
    plan = plans.get(keys)
    if plan is None:
        if not keys or len(keys) > 16 or not _ONLY_STR.issuperset(map(type, keys)):
            return None
        plan = _FlatPlan(keys)
        if len(plans) < _MAX_PLANS:
            plans[keys] = plan
    values = plan.get(value)
    # Keys again: an equal str subclass finds the plan too, and is not a canonical key.
    if not _ONLY_STR.issuperset(map(type, keys + values)):
        return None
    chars = sum(map(len, values))
    if chars > plan.small and not fits_one_chunk(chars, plan.fixed, values):
        return None
    return plan.template % tuple(map(_escape, values))


# --- emitting ------------------------------------------------------------------------


def _str_pieces(text: str) -> Iterator[bytes]:
    if len(text) <= _SLICE:
        yield _escape(text).encode("ascii")
        return
    yield b'"'
    for start in range(0, len(text), _SLICE):
        yield _escape(text[start : start + _SLICE])[1:-1].encode("ascii")
    yield b'"'


def _pieces(value: Any) -> Iterator[bytes]:
    """Canonical bytes of a measured value, in pieces of at most 12 * _SLICE + 2 bytes."""
    kind = type(value)
    if kind is str:
        yield from _str_pieces(value)
    elif kind is dict:
        yield b"{"
        for number, key in enumerate(sorted(value)):
            if number:
                yield b","
            yield from _str_pieces(key)
            yield b":"
            yield from _pieces(value[key])
        yield b"}"
    elif kind is list or kind is tuple:
        yield b"["
        for number, item in enumerate(value):
            if number:
                yield b","
            yield from _pieces(item)
        yield b"]"
    else:
        yield _ENCODER.encode(value).encode("ascii")


def chunks(value: object, size: int) -> Iterator[bytes]:
    """Emit a value :meth:`Budget.measure` accepted (``size`` is what it returned) as
    canonical bytes, in chunks of at most ``CHUNK_BYTES``."""
    if size <= CHUNK_BYTES:
        # The same bytes as the streaming path below (tests compare both), in one C call.
        yield _ENCODER.encode(value).encode("ascii")
        return
    buffer: list[bytes] = []
    filled = 0
    for piece in _pieces(value):
        if filled + len(piece) > CHUNK_BYTES:
            yield b"".join(buffer)
            buffer, filled = [], 0
        buffer.append(piece)
        filled += len(piece)
    if buffer:
        yield b"".join(buffer)


def frame(sink: Sink, value: object, size: int) -> None:
    """Append one measured document to ``sink``: its u64 big-endian length, then its bytes.

    ``value`` is the measured value, or its :class:`Rendered` form (of ``size`` bytes)."""
    if type(value) is Rendered:
        sink.update(value.framed)
        return
    sink.update(_U64.pack(size))
    if size <= CHUNK_BYTES:  # the common case of chunks(), without a generator
        sink.update(_encode(value).encode("ascii"))
        return
    for chunk in chunks(value, size):
        sink.update(chunk)


def canonical_bytes(value: object, limits: CanonicalLimits = CANONICAL_LIMITS) -> bytes:
    """The whole canonical text of one value (for small values and tests; measured first)."""
    return b"".join(chunks(value, Budget(limits).measure(value)))
