"""What the cache knows, as immutable values shared by the store, planner and capture.

Digests, fingerprints and plan descriptors are lowercase hex strings (stored in JSON, never
packed binary). A record is named inside its scope by ``BlockRef`` (end digest + payload
fingerprint): that pair is what a plan lists, and what a later record's ``prior_plan``
stores, so the planner can check an ancestor is the very block that was dispatched.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, NamedTuple

HEX_DIGEST_LENGTH: Final = 64


class MarkerKind(StrEnum):
    """Generation-independent safety markers (design §4)."""

    START_POISON = "start_poison"  # unknown output at a position: no envelope there replays
    END_CONFLICT = "end_conflict"  # two payloads for one visible identity: neither replays
    END_REJECTED = "end_rejected"  # the upstream refused the block replayed there: never again


class BlockRef(NamedTuple):  # a named tuple: plans build and hash hundreds per request
    """One record inside a scope: the visible history it ends and the payload it holds."""

    end_digest: str
    payload_fingerprint: str


class StoredSizeExceeded(ValueError):
    """A stored value is larger than the caller may load (checked before loading it)."""


_HEX_DIGEST = re.compile(f"[0-9a-f]{{{HEX_DIGEST_LENGTH}}}")


def is_hex_digest(value: Any) -> bool:
    return isinstance(value, str) and _HEX_DIGEST.fullmatch(value) is not None


# --- plans as text ------------------------------------------------------------------------

MAX_STORED_PLAN: Final = 4096  # descriptors; far above the 256-record plan limit
# One descriptor, ["<end digest>","<payload fingerprint>"], as _SHAPE sees it (0x01: a
# hex digit); a plan's text has one every PLAN_STRIDE characters (descriptor and comma).
_HEX_SLOT: Final = b"\x01" * HEX_DIGEST_LENGTH
_DESCRIPTOR: Final = b'["' + _HEX_SLOT + b'","' + _HEX_SLOT + b'"]'
PLAN_STRIDE: Final = len(_DESCRIPTOR) + 1
_REF_PARTS: Final = re.compile(rf'"([0-9a-f]{{{HEX_DIGEST_LENGTH}}})"')


def _shape_table() -> bytes:
    # Lowercase hex digits become 0x01 (a hex slot of _DESCRIPTOR); a literal 0x01 becomes
    # 0x00, so only a hex digit can fill a hex slot.
    table = bytearray(range(256))
    table[1] = 0
    for byte in b"0123456789abcdef":
        table[byte] = 1
    return bytes(table)


_SHAPE: Final = _shape_table()


def _shape_of(count: int) -> bytes:
    """What the one spelling of a ``count``-descriptor plan looks like through _SHAPE."""
    return b"[" + b",".join([_DESCRIPTOR] * count) + b"]"


def plan_text_length(count: int) -> int:
    """Characters of the one spelling of a ``count``-descriptor plan."""
    return 2 if count == 0 else 1 + count * PLAN_STRIDE


def plan_digest(text: str) -> str:
    """SHA-256 (hex) of a stored plan's text, as its ``prior_plan_digest`` column holds it."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class PlanStamp:
    """A plan known by its descriptor count and :func:`plan_digest`, as the planner reads
    an ancestor's: comparing stamps compares plans without reading (or storing twice) the
    text, which is up to 33 KB per record and far from the row's other columns."""

    count: int
    digest: str


class PlanText:
    """A replay plan (the records dispatched beneath a generation) in its one stored
    spelling: compact JSON of fixed-width descriptors, ``[["<end>","<payload>"],...]``.

    With one spelling, equal plans have equal text and the plan of a record's first ``k``
    ancestors is a prefix of its text (:meth:`prefix`), so the planner compares plans as
    strings at C speed instead of parsing every ancestor's plan (quadratic in plan
    length). Text read back from the store is untrusted until :meth:`refs` validates it;
    an unvalidated text only equals a validated one when it is that very text. Its
    :attr:`stamp` stands for it where the text is not read (an ancestor's plan).
    """

    __slots__ = ("_refs", "_stamp", "count", "text")

    def __init__(self, text: str, count: int, refs: tuple[BlockRef, ...] | None = None) -> None:
        self.text = text
        self.count = count
        self._refs = refs  # set once validated
        self._stamp: PlanStamp | None = None  # set once computed

    @classmethod
    def of(cls, refs: Sequence[BlockRef]) -> PlanText:
        """The plan of ``refs``; ``ValueError`` for anything that would not read back."""
        if len(refs) > MAX_STORED_PLAN:
            raise ValueError(f"a plan of {len(refs)} records is over {MAX_STORED_PLAN}")
        for ref in refs:
            if not (is_hex_digest(ref.end_digest) and is_hex_digest(ref.payload_fingerprint)):
                raise ValueError("plan descriptors must be lowercase hex digests")
        text = ",".join(f'["{ref.end_digest}","{ref.payload_fingerprint}"]' for ref in refs)
        return cls(f"[{text}]", len(refs), tuple(refs))

    def refs(self) -> tuple[BlockRef, ...] | None:
        """The plan's records, or ``None`` when the text is not the one spelling of
        ``count`` descriptors (validated once, at C speed)."""
        if self._refs is None and self.count <= MAX_STORED_PLAN:
            try:
                shape = self.text.encode("ascii").translate(_SHAPE)
            except UnicodeEncodeError:
                return None
            if shape == _shape_of(self.count):
                digests = _REF_PARTS.findall(self.text)
                self._refs = tuple(map(BlockRef, digests[::2], digests[1::2]))
        return self._refs

    def prefix(self, count: int) -> PlanText:
        """The plan of the first ``count`` records (``count`` at most :attr:`count`)."""
        assert 0 <= count <= self.count
        refs = None if self._refs is None else self._refs[:count]
        if count == 0:
            return PlanText("[]", 0, refs)
        return PlanText(self.text[: count * PLAN_STRIDE] + "]", count, refs)

    def extended(self, ref: BlockRef) -> PlanText:
        """This (validated) plan with ``ref`` appended."""
        refs = self.refs()
        assert refs is not None, "extend a validated plan"
        tail = PlanText.of((ref,)).text[1:]
        return PlanText(self.text[:-1] + ("," if refs else "") + tail, self.count + 1, (*refs, ref))

    @property
    def stamp(self) -> PlanStamp:
        if self._stamp is None:
            self._stamp = PlanStamp(self.count, plan_digest(self.text))
        return self._stamp

    def prefix_stamps(self, count: int) -> list[PlanStamp]:
        """The stamps of :meth:`prefix` ``(0)`` to ``(count - 1)`` of this validated plan, in
        one pass over its text (hashing each prefix anew would be quadratic)."""
        assert 0 <= count <= self.count
        assert self.refs() is not None, "stamp the prefixes of a validated plan"
        stamps = [EMPTY_STAMP]
        data = memoryview(self.text.encode("ascii"))
        running = hashlib.sha256()
        for index in range(1, count):
            running.update(data[(index - 1) * PLAN_STRIDE : index * PLAN_STRIDE])
            closed = running.copy()
            closed.update(b"]")
            stamps.append(PlanStamp(index, closed.hexdigest()))
        return stamps[:count]

    def starts_with(self, other: PlanText) -> bool:
        """Whether ``other`` is this plan's first ``other.count`` records."""
        return self.count >= other.count and self.prefix(other.count).text == other.text

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PlanText):
            return NotImplemented
        return self.count == other.count and self.text == other.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"PlanText(count={self.count})"


EMPTY_PLAN: Final = PlanText("[]", 0, ())
EMPTY_STAMP: Final = EMPTY_PLAN.stamp


@dataclass(frozen=True)
class ScopeRow:
    """A scope as stored: its identity digest, current generation and fencing targets."""

    id: int
    digest: str
    generation: int
    credential: str  # HMAC fingerprint, never the raw credential
    model: str
    caller: str | None  # HMAC fingerprint of the caller value


class Observation(NamedTuple):  # a named tuple: a plan reads hundreds per request
    """One observed generation at one visible identity (admitted or not)."""

    id: int
    scope_id: int
    generation: int
    position: int  # index of the assistant message in the visible history
    start_digest: str
    end_digest: str
    envelope_fingerprint: str
    payload_fingerprint: str
    output_hash: str  # SHA-256 of the exact stored payload bytes
    # The replay plan dispatched when this was generated: its text, or only its stamp when
    # read as an ancestor (RecordSource.observations_by_refs).
    prior_plan: PlanText | PlanStamp
    intent_id: str | None  # producing intent (kept after the intent row is gone)
    snapshot: str | None  # the upstream model snapshot that produced it
    replayable: bool  # admitted with a payload
    observed_at: float  # wall clock seconds

    @property
    def ref(self) -> BlockRef:
        return BlockRef(self.end_digest, self.payload_fingerprint)

    @property
    def plan_stamp(self) -> PlanStamp:
        plan = self.prior_plan
        return plan.stamp if isinstance(plan, PlanText) else plan


@dataclass(frozen=True)
class StoredPayload:
    """An admitted record's original ``response.output`` JSON, exactly as stored."""

    observation_id: int
    output_json: str
    size: int  # bytes of output_json as UTF-8
    touched_at: float  # wall clock seconds, max(existing, now) on qualifying touches
