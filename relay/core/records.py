"""What the cache knows, as immutable values shared by the store, planner and capture.

Digests and fingerprints are lowercase hex strings (never packed binary). A record is named
inside its scope by ``BlockRef`` (end digest + payload fingerprint): that pair is what a
plan lists and what its chain digest folds in, so the planner can check an ancestor is the
very block that was dispatched. A later record's ``prior_plan`` stores only a link to the
plan's last block plus the chain digest (:class:`PriorPlan`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, NamedTuple

from relay.errors import InternalSignal

HEX_DIGEST_LENGTH: Final = 64

# Retention touches are coarse (design §6 Retention): a touch rewrites a payload's
# touched_at only once the stored value is at least this much older than now, so the next
# turn of a conversation rewrites (and syncs) none of the pages its replayed payloads sit
# on. A stored touch can therefore lag the last use by up to this much; expiry and cleanup
# add it to the window (:func:`idle_window_s`), so nothing expires or is deleted before it
# has been idle for the whole window, and at most this much later.
TOUCH_GRANULARITY_S: Final = 3600.0


def idle_window_s(retention_s: float) -> float:
    """How long a payload's *stored* ``touched_at`` may lie in the past before it expires
    (the planner's ``record_expired``) and may be reclaimed (cleanup's cutoff): the
    configured window plus the touch granularity."""
    return retention_s + TOUCH_GRANULARITY_S


class MarkerKind(StrEnum):
    """Generation-independent safety markers (design §4)."""

    START_POISON = "start_poison"  # unknown output at a position: no envelope there replays
    END_CONFLICT = "end_conflict"  # two payloads for one visible identity: neither replays
    END_REJECTED = "end_rejected"  # the upstream refused the block replayed there: never again


class BlockRef(NamedTuple):  # a named tuple: plans build and hash hundreds per request
    """One record inside a scope: the visible history it ends and the payload it holds."""

    end_digest: str
    payload_fingerprint: str


class StoredSizeExceeded(InternalSignal):
    """A stored value is larger than the caller may load (checked before loading it)."""


@dataclass(frozen=True, slots=True)
class OversizedPayload:
    """In a batch load, stands for a stored payload over the load limit (decided on its
    size column, so its text was never read): a value, not an exception to be raised."""

    observation_id: int
    size: int
    max_bytes: int

    def describe(self) -> str:
        return (
            f"stored payload of observation {self.observation_id} is {self.size} bytes, "
            f"over the {self.max_bytes} byte load limit"
        )


_HEX_DIGEST = re.compile(f"[0-9a-f]{{{HEX_DIGEST_LENGTH}}}")


def is_hex_digest(value: Any) -> bool:
    return isinstance(value, str) and _HEX_DIGEST.fullmatch(value) is not None


def _is_hex_text(value: str) -> bool:
    """:func:`is_hex_digest` for a ``str``, at C speed (it runs on every record read)."""
    return len(value) == HEX_DIGEST_LENGTH and not value.strip("0123456789abcdef")


# --- prior plans as chain links ----------------------------------------------------------

# The digest of the empty plan; each block appended to a plan folds its ref into the chain
# (chain_digest), so a plan's digest commits to its whole ordered list of refs.
EMPTY_CHAIN: Final = hashlib.sha256(b"relay.replay-chain.v1").hexdigest()


# What the v5 migration writes into a record it cannot convert (and retires): equal to no
# chain digest, so that record replays nothing and fails every child's link check.
RETIRED_CHAIN: Final = ""


# chain_digest's results, by its string arguments (a pure function): every plan of a
# conversation folds the same links again, twice per block (design §21). Bounded: cleared
# when full. Only str arguments are remembered, so no two spellings (1 and 1.0 from a
# damaged row) can share an entry.
_CHAIN_MEMO: dict[tuple[str, str, str], str] = {}
CHAIN_MEMO_ENTRIES: Final = 8192


def chain_digest(prior_chain: str, ref: BlockRef) -> str:
    """The chain digest of a plan: that of the plan before its last block (``prior_chain``)
    extended by the last block's ``ref``. Fixed-width hex fields, so no framing needed."""
    end, payload = ref
    strings = type(prior_chain) is str and type(end) is str and type(payload) is str
    if strings and (known := _CHAIN_MEMO.get((prior_chain, end, payload))) is not None:
        return known
    data = f"{prior_chain}{end}{payload}"
    digest = hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()
    if strings:
        if len(_CHAIN_MEMO) >= CHAIN_MEMO_ENTRIES:
            _CHAIN_MEMO.clear()
        _CHAIN_MEMO[prior_chain, end, payload] = digest
    return digest


def plan_chain(refs: Sequence[BlockRef]) -> str:
    """The chain digest of the plan ``refs`` (ancestors first)."""
    chain = EMPTY_CHAIN
    for ref in refs:
        chain = chain_digest(chain, ref)
    return chain


@dataclass(frozen=True, slots=True)
class PriorPlan:
    """The replay plan a generation was dispatched on, in O(1) space (design §6): a link to
    the plan's last block, the plan's length and its chain digest. The rest of the plan is
    that block's own prior plan, and so on down the links; walking them and re-deriving
    each digest (:attr:`Observation.chain_plan`) proves the whole ordered list, so a
    record never stores its ancestry again."""

    parent_id: int | None  # the observation of the plan's last block; None: empty plan
    count: int  # blocks in the plan
    chain: str  # chain digest of the plan's refs (plan_chain)

    @property
    def well_formed(self) -> bool:
        """Whether the fields can describe a plan at all (damage cannot pass). A plan of
        blocks whose link is gone (``parent_id`` None: its last block was not in the store
        when the link was made) is a plan whose ancestors are missing, not a damaged one."""
        if self.count == 0:
            return self.parent_id is None and self.chain == EMPTY_CHAIN
        return self.count > 0 and isinstance(self.chain, str) and _is_hex_text(self.chain)


EMPTY_PLAN: Final = PriorPlan(None, 0, EMPTY_CHAIN)


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
    prior_plan: PriorPlan  # the replay plan dispatched when this was generated
    intent_id: str | None  # producing intent (kept after the intent row is gone)
    snapshot: str | None  # the upstream model snapshot that produced it
    replayable: bool  # admitted with a payload
    observed_at: float  # wall clock seconds

    @property
    def ref(self) -> BlockRef:
        return BlockRef(self.end_digest, self.payload_fingerprint)

    @property
    def chain_plan(self) -> PriorPlan:
        """The plan of this record's chain (its ancestors, then itself): the prior plan of
        a generation dispatched with that chain replayed, and what a child's link must
        match."""
        plan = self.prior_plan
        return PriorPlan(self.id, plan.count + 1, chain_digest(plan.chain, self.ref))


class StoredPayload(NamedTuple):  # a named tuple: a plan loads hundreds per request
    """An admitted record's original ``response.output`` JSON, exactly as stored: its
    UTF-8 bytes as the row holds them, never decoded (the planner hashes and replays
    those bytes; a damaged row fails its hash check)."""

    observation_id: int
    output_json: bytes
    size: int  # len(output_json)
    touched_at: float  # wall seconds: the last use, up to TOUCH_GRANULARITY_S earlier
