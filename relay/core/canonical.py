"""Canonical JSON: the exact bytes the visible-history identity hashes (pure, bounded).

The format (part of ``IDENTITY_FORMAT_VERSION``):

- UTF-8 JSON text with no insignificant whitespace (separators ``,`` and ``:``).
- Object members sorted by the code points of their keys; array order kept.
- Strings escape ``"`` and ``\\`` as ``\\"`` and ``\\\\``; U+0008, U+000C, U+000A,
  U+000D, U+0009 as ``\\b \\f \\n \\r \\t``; the other code points below U+0020 as
  ``\\u00xx`` (lowercase hex); every other code point is its UTF-8 bytes. This is exactly
  ``json.dumps(ensure_ascii=False)`` encoded as UTF-8. A lone surrogate has no UTF-8 form
  and is refused (``string``).
- Integers in decimal, from -2**63 to 2**64 - 1 (beyond: refused, ``number``); floats as
  orjson writes them (the shortest text that round-trips; NaN and infinities refused);
  ``true``, ``false``, ``null``.
- Only ``dict`` (string keys), ``list``/``tuple``, ``str``, ``int``, ``float``, ``bool`` and
  ``None`` are canonical; anything else is refused.

orjson emits it: one C call renders a whole document, several times faster than the
stdlib's encoder, which is what keeps identity cheap next to parsing the request. Every
byte goes through it, so the format cannot drift between paths; a different orjson
release could only change float texts, which changes digests (misses), never meaning.

Bounded: :meth:`Budget.measure` walks a value first (exact byte size, node count, depth)
and refuses before a byte is emitted; :func:`chunks` then emits the measured value in
pieces of at most ``CHUNK_BYTES``, so no canonical text longer than one chunk ever exists.

:meth:`Budget.render_text` is the one-pass form for documents that fit in one chunk: it
measures *by rendering* (the text's length is its size) and keeps the bytes for the
caller to emit later, so a document is encoded once, not measured and then encoded
again. It renders only what is provably at most one chunk
(every code point encodes to at most 6 bytes) and charges the budget with the same sizes,
node counts and depths as :meth:`Budget.measure`; whatever it cannot decide that way (a
limit reached, a value outside the fast shapes) goes through :meth:`Budget.measure`, so
refusals are exactly the ones ``measure`` gives. :meth:`Budget.render_document` is the
same for any object or array (the scope with its tools' schemas, a message with content
parts): a walk over the containers alone and two C calls (``marshal`` for exact types,
orjson for the text) instead of measuring every value in Python. A caller that renders a
whole history before emitting holds at most the history's canonical bytes, which the byte
limit bounds.
"""

from __future__ import annotations

import marshal
import math
import struct
from collections.abc import Iterator
from typing import Any, Final, Protocol, cast

import orjson

from relay.core.limits import CANONICAL_LIMITS, CHUNK_BYTES, CanonicalLimits
from relay.errors import InternalSignal

_dumps: Final = orjson.dumps
_SORTED: Final = orjson.OPT_SORT_KEYS
# What orjson raises for a value outside the format (a TypeError).
EncodeError: Final = orjson.JSONEncodeError
# Emission encodes long strings slice by slice; at most 6 bytes per code point keeps
# every piece under CHUNK_BYTES.
_SLICE: Final = 4096
# Measuring slices long strings too, only to bound its temporaries.
_MEASURE_SLICE: Final = 65536
_SHORT: Final = 256  # below this, one encoding call beats counting
# The framing of every document: its length as a u64 big-endian count of bytes.
U64: Final = struct.Struct(">Q")
FRAMING: Final = U64.size
_INT_MIN: Final = -(2**63)
_INT_MAX: Final = 2**64 - 1

# Encoded, a code point takes at most 6 bytes (``\\u00xx``; UTF-8 needs at most 4).
MAX_ESCAPE: Final = 6
ONLY_STR: Final = frozenset((str,))  # ONLY_STR.issuperset(map(type, xs)): all exactly str
_MAX_PLANS: Final = 64  # flat templates one Budget keeps (distinct key sets)


def render_sorted(value: object) -> bytes:
    """The canonical text of a value whose every *value* (not key) the caller checked to
    be of an exact canonical type, in one call. Keys need no check: orjson refuses a key
    that is not exactly a ``str`` (a subclass, an enum member) with :data:`EncodeError`,
    as it does a lone surrogate; renderers then fall back to :meth:`Budget.measure`, which
    refuses it with its reason. (Values get no such check: an enum member, say, renders
    as its value.)"""
    return _dumps(value, option=_SORTED)


def render_unsorted(value: object) -> bytes:
    """The canonical text of a value of canonical types whose every object already has
    its members in code-point order (one-pass renderers build it so), in one call without
    sorting. Raises :data:`EncodeError` for a lone surrogate; renderers then fall back to
    :meth:`Budget.measure`, which refuses it with its reason."""
    return _dumps(value)


def _weights() -> bytes:
    table = bytearray(256)  # printable ASCII (and DEL) adds nothing
    for byte in range(0x20):
        table[byte] = 5  # \u00xx: six bytes for one
    for byte in b'"\\\b\f\n\r\t':
        table[byte] = 1  # two-byte escapes
    return bytes(table)


# Escape weights of ASCII bytes: an ASCII string's encoded size is its length plus the
# weights of its bytes, counted with C-speed translate/count at about twice the speed of
# encoding it (measuring must not cost a second emission).
_WEIGHTS: Final = _weights()


class CanonicalRefused(InternalSignal):
    """A deterministic refusal: the same value always gets it, so callers skip caching
    without an intent or a marker. Not a ``RelayError``: the request itself is fine."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CanonicalLimitExceeded(CanonicalRefused):
    """Over a canonical limit; ``reason`` is ``bytes``, ``messages``, ``nodes`` or ``depth``."""


class NotCanonicalizable(CanonicalRefused):
    """A value the format cannot carry exactly; ``reason`` is ``number`` (NaN, an infinity,
    an integer beyond 64 bits), ``string`` (a lone surrogate), ``key`` or ``type``."""


class Sink(Protocol):
    """Where emitted bytes go (a hashlib object)."""

    def update(self, data: bytes, /) -> None: ...


class Fanout:
    """A sink feeding one emission to several sinks (each document is emitted once)."""

    __slots__ = ("sinks",)

    def __init__(self, sinks: tuple[Sink, ...]) -> None:
        self.sinks = sinks

    def update(self, data: bytes, /) -> None:
        for sink in self.sinks:
            sink.update(data)


# --- measuring -----------------------------------------------------------------------


def _encoded_size(text: str) -> int:
    try:
        return len(_dumps(text))
    except EncodeError:
        raise NotCanonicalizable("string") from None


def _str_size(text: str, budget: Budget) -> int:
    if len(text) < _SHORT:
        return _encoded_size(text)
    if len(text) > budget.room:  # never shorter encoded than raw: refuse without work
        raise CanonicalLimitExceeded("bytes")
    size = 2
    for start in range(0, len(text), _MEASURE_SLICE):
        piece = text[start : start + _MEASURE_SLICE]
        if piece.isascii():
            weights = piece.encode("ascii").translate(_WEIGHTS)
            size += len(piece) + weights.count(1) + 5 * weights.count(5)
        else:
            size += _encoded_size(piece) - 2
    return size


def _scalar_size(value: Any) -> int:
    kind = type(value)
    if value is None or value is True:
        return 4
    if value is False:
        return 5
    if kind is int:
        if not _INT_MIN <= value <= _INT_MAX:
            raise NotCanonicalizable("number")
        return len(int.__repr__(value))
    if kind is float:
        if not math.isfinite(value):
            raise NotCanonicalizable("number")
        return len(_dumps(value))
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
        self.plans: dict[tuple[str, ...], int] = {}  # render_flat()'s bounds per key set

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

    def render_text(self, value: object) -> tuple[int, bytes | None]:
        """Measure ``value`` like :meth:`measure` (same size, charges and refusals) and
        return ``(size, text)``: the canonical text, rendered once, when it fits in one
        chunk, else ``None`` (the value is to be streamed with :func:`frame`)."""
        text = None
        kind = type(value)
        if kind is dict:
            flat = cast("dict[Any, Any]", value)
            text = self.render_flat(flat)
            if text is None:
                text = self.render_document(flat)
        elif kind is list:
            text = self.render_document(cast("list[Any]", value))
        if text is not None:
            return len(text), text
        size = self.measure(value)
        if size <= CHUNK_BYTES:
            return size, _dumps(value, option=_SORTED)
        return size, None

    def render_document(self, value: dict[Any, Any] | list[Any]) -> bytes | None:
        """The canonical text of any object or array that provably fits one chunk, charged
        like :meth:`measure` charges it; ``None``, charging nothing, otherwise (then
        :meth:`measure` it for the size or the exact refusal).

        The C code does the per-value work :meth:`measure` does in Python: a walk over the
        containers alone counts nodes, depth and code points (which bound the text before
        it is rendered: at most one chunk ever exists), ``marshal`` refuses every type that
        is not exactly a canonical one (a subclass, an enum member, any other object) and
        orjson renders, refusing non-str keys, lone surrogates and integers beyond 64 bits.
        A float the walk meets must be finite (orjson would write NaN as ``null``)."""
        tally = [0, 0]  # children of every container (nodes less the document), code points
        try:
            depth = _shape(value, 1, tally, self.limits.max_depth)
        except (_Unfit, TypeError):  # TypeError: a key without a length (measure refuses it)
            return None
        nodes = tally[0] + 1
        if MAX_ESCAPE * tally[1] + _NODE_BYTES * nodes > CHUNK_BYTES:
            return None
        try:
            marshal.dumps(value)  # only exact builtin types marshal (or buffers orjson refuses)
            text = _dumps(value, option=_SORTED)
        except (ValueError, EncodeError):
            return None
        return text if self.admit(len(text), nodes, depth) else None

    def render_flat(self, value: dict[Any, Any]) -> bytes | None:
        """The canonical text of a non-empty dict of strings (user, system and tool
        messages) that provably fits one chunk, charged like :meth:`measure` charges it
        (the object and its values; depth 1); ``None``, charging nothing, for any other
        value or when it breaks a limit (then :meth:`measure` it for the exact refusal).

        One orjson call renders it; a bound per key set (``plans``) decides from lengths
        alone that the text fits one chunk before it is rendered."""
        keys = tuple(value)
        small = self.plans.get(keys)
        if small is None:
            small = _flat_bound(keys)
            if small is None:
                return None
            if len(self.plans) < _MAX_PLANS:
                self.plans[keys] = small
        values = value.values()
        if not ONLY_STR.issuperset(map(type, values)) or sum(map(len, values)) > small:
            return None
        try:
            # An equal str subclass key finds the plan too: rendering refuses it.
            text = render_sorted(value)
        except EncodeError:  # a lone surrogate or an inexact key: measure() refuses it
            return None
        # Depth 1: the object and its values.
        return text if self.admit(len(text), len(values) + 1, 1) else None


class _Unfit(InternalSignal):
    """The walk met what only :meth:`Budget.measure` decides (too deep, a non-finite float);
    private to :meth:`Budget.render_document`, never escapes it."""


# Bytes a value adds besides its strings' encoded code points, at most: a comma, a key's
# quotes and colon, and its own text when it is not a string (20 for a 64-bit integer, 24
# for a float; quotes or brackets otherwise).
_NODE_BYTES: Final = 32


def _shape(value: dict[Any, Any] | list[Any] | tuple[Any, ...], depth: int, tally: list[int],
           max_depth: int) -> int:  # fmt: skip
    """The deepest container nesting at or below ``value`` (itself at ``depth``); adds its
    children to ``tally[0]`` and the code points of its keys and strings to ``tally[1]``.
    Only containers are visited by call: strings are counted by ``len``."""
    if depth > max_depth:
        raise _Unfit
    tally[0] += len(value)
    if type(value) is dict:
        tally[1] += sum(map(len, value))
        items: Any = value.values()
    else:
        items = value
    deepest = depth
    chars = 0
    for item in items:
        kind = type(item)
        if kind is str:
            chars += len(item)
        elif kind is dict or kind is list or kind is tuple:
            below = _shape(item, depth + 1, tally, max_depth)
            deepest = max(deepest, below)
        elif kind is float and not math.isfinite(item):
            raise _Unfit
    tally[1] += chars
    return deepest


def fits_one_chunk(chars: int, fixed: int) -> bool:
    """Whether strings of ``chars`` code points in all, encoded, plus ``fixed`` bytes of
    literal text are provably at most one chunk: decided from lengths alone, before
    anything is encoded."""
    return MAX_ESCAPE * chars + fixed <= CHUNK_BYTES


def one_chunk_chars(fixed: int) -> int:
    """The most code points strings may hold in all for them, encoded, plus ``fixed``
    bytes of literal text to fit one chunk whatever they hold (:func:`fits_one_chunk`)."""
    return (CHUNK_BYTES - fixed) // MAX_ESCAPE


# --- one-pass rendering of flat objects ------------------------------------------------
# A dict whose keys and values are all strings (user, system and tool messages) is
# rendered by one orjson call (Budget.render_flat); a bound per key set is kept.


def _flat_bound(keys: tuple[Any, ...]) -> int | None:
    """The most code points the values of a flat dict with these keys may hold in all for
    its text to fit one chunk, whatever they hold; ``None`` for keys outside the path."""
    if not keys or len(keys) > 16 or not ONLY_STR.issuperset(map(type, keys)):
        return None
    try:
        # Bytes besides the values' encoded code points: braces, commas, colons, keys
        # and the values' quotes.
        fixed = sum(len(_dumps(key)) + 4 for key in keys) + 1
    except EncodeError:  # a key with a lone surrogate: measure() refuses it
        return None
    return one_chunk_chars(fixed)


# --- emitting ------------------------------------------------------------------------


def _str_pieces(text: str) -> Iterator[bytes]:
    if len(text) <= _SLICE:
        yield _dumps(text)
        return
    yield b'"'
    for start in range(0, len(text), _SLICE):
        yield _dumps(text[start : start + _SLICE])[1:-1]
    yield b'"'


def _pieces(value: Any) -> Iterator[bytes]:
    """Canonical bytes of a measured value, in pieces of at most 6 * _SLICE + 2 bytes."""
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
        yield _dumps(value)


def chunks(value: object, size: int) -> Iterator[bytes]:
    """Emit a value :meth:`Budget.measure` accepted (``size`` is what it returned) as
    canonical bytes, in chunks of at most ``CHUNK_BYTES``."""
    if size <= CHUNK_BYTES:
        # The same bytes as the streaming path below (tests compare both), in one C call.
        yield _dumps(value, option=_SORTED)
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
    """Append one measured document to ``sink``: its u64 big-endian length, then its bytes."""
    sink.update(U64.pack(size))
    if size <= CHUNK_BYTES:  # the common case of chunks(), without a generator
        sink.update(_dumps(value, option=_SORTED))
        return
    for chunk in chunks(value, size):
        sink.update(chunk)


def append_framed(out: bytearray, text: bytes | None) -> int | None:
    """Append a rendered text to ``out``, framed; its size (``None``: nothing rendered)."""
    if text is None:
        return None
    out += U64.pack(len(text))
    out += text
    return len(text)


def canonical_bytes(value: object, limits: CanonicalLimits = CANONICAL_LIMITS) -> bytes:
    """The whole canonical text of one value (for small values and tests; measured first)."""
    return b"".join(chunks(value, Budget(limits).measure(value)))
