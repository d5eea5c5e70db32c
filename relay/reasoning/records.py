"""What the cache knows, as immutable values shared by the store, planner and capture.

Digests, fingerprints and plan descriptors are lowercase hex strings (stored in JSON, never
packed binary). A record is named inside its scope by ``BlockRef`` (end digest + payload
fingerprint): that pair is what a plan lists, and what a later record's ``prior_plan``
stores, so the planner can check an ancestor is the very block that was dispatched.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

HEX_DIGEST_LENGTH: Final = 64


class MarkerKind(StrEnum):
    """Generation-independent safety markers (spec §4)."""

    START_POISON = "start_poison"  # unknown output at a position: no envelope there replays
    END_CONFLICT = "end_conflict"  # two payloads for one visible identity: neither replays


@dataclass(frozen=True)
class BlockRef:
    """One record inside a scope: the visible history it ends and the payload it holds."""

    end_digest: str
    payload_fingerprint: str

    def as_json(self) -> list[str]:
        return [self.end_digest, self.payload_fingerprint]

    @staticmethod
    def from_json(value: Any) -> BlockRef:
        """Parse a stored descriptor; ``ValueError`` when it is not two hex digests."""
        if (
            not isinstance(value, list)
            or len(value) != 2
            or not all(is_hex_digest(part) for part in value)
        ):
            raise ValueError("a plan descriptor must be [end_digest, payload_fingerprint]")
        return BlockRef(value[0], value[1])


class StoredSizeExceeded(ValueError):
    """A stored value is larger than the caller may load (checked before loading it)."""


_HEX_DIGEST = re.compile(f"[0-9a-f]{{{HEX_DIGEST_LENGTH}}}")


def is_hex_digest(value: Any) -> bool:
    return isinstance(value, str) and _HEX_DIGEST.fullmatch(value) is not None


def plan_json(plan: Sequence[BlockRef]) -> list[list[str]]:
    return [ref.as_json() for ref in plan]


@dataclass(frozen=True)
class ScopeRow:
    """A scope as stored: its identity digest, current generation and fencing targets."""

    id: int
    digest: str
    generation: int
    credential: str  # HMAC fingerprint, never the raw credential
    model: str
    caller: str | None  # HMAC fingerprint of the caller value


@dataclass(frozen=True)
class Observation:
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
    prior_plan: tuple[BlockRef, ...]  # the replay plan dispatched when this was generated
    intent_id: str | None  # producing intent (kept after the intent row is gone)
    snapshot: str | None  # the upstream model snapshot that produced it
    replayable: bool  # admitted with a payload
    observed_at: float  # wall clock seconds

    @property
    def ref(self) -> BlockRef:
        return BlockRef(self.end_digest, self.payload_fingerprint)


@dataclass(frozen=True)
class StoredPayload:
    """An admitted record's original ``response.output`` JSON, exactly as stored."""

    observation_id: int
    output_json: str
    size: int  # bytes of output_json as UTF-8
    touched_at: float  # wall clock seconds, max(existing, now) on qualifying touches
