"""What ``relay cache verify`` concludes about a stored record (design §6, §11): pure checks
over rows the storage layer read (relay.storage.verify), no I/O.

Each check re-derives what the planner or capture would rely on, with their own
functions: a payload's digests (:func:`relay.core.capture.payload_digests`), a link's
chain digest and count (:attr:`relay.core.records.Observation.chain_plan`, what the
planner compares a child's prior plan with), and the block rules of
``planner._check_block`` plus capture's admission rules. Checking every link against its
parent proves every whole chain, by induction down the links.

A finding is a reason code, never a value: nothing here looks at ciphertext beyond "is it
a non-empty string", and nothing returned quotes a payload or a digest.

*Damage* is what no relay wrote: the store refuses (withholds) replay wherever it lies,
so it never replays wrongly, but the operator should know. *Notes* are states the relay
makes on purpose: a payload reclaimed by cleanup, one already gone when the store reached
schema v6 (v5 kept no mark), a record the v5 migration retired or could not link, an
intent the next start recovers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

import orjson

from relay.core.capture import payload_digests
from relay.core.planner import REPLAYABLE_ITEM_TYPES
from relay.core.records import EMPTY_PLAN, RETIRED_CHAIN, Observation

EXAMPLES_PER_CODE: Final = 10  # observation ids kept per code, for the report


class Damage(StrEnum):
    INTEGRITY_ERROR = "integrity_error"  # PRAGMA integrity_check, or an unreadable row
    FOREIGN_KEY_VIOLATION = "foreign_key_violation"  # PRAGMA foreign_key_check
    PAYLOAD_MISSING = "payload_missing"  # replayable, no payload, not reclaimed
    PAYLOAD_DIGEST_MISMATCH = "payload_digest_mismatch"  # bytes vs output_hash / payload_fp
    PAYLOAD_SIZE_MISMATCH = "payload_size_mismatch"  # size column vs the bytes
    PAYLOAD_MALFORMED = "payload_malformed"  # not a block capture could have admitted
    CALL_PAIRING_BROKEN = "call_pairing_broken"  # a call without id/name/arguments, or twice
    DUPLICATE_ITEM = "duplicate_item"  # one item id twice in a block
    PARENT_MISSING = "parent_missing"  # the link leads to no row
    PARENT_NOT_OLDER = "parent_not_older"  # the link leads to a newer row (or itself)
    PARENT_OTHER_SCOPE = "parent_other_scope"  # ... to another conversation scope
    PARENT_NOT_BELOW = "parent_not_below"  # ... to a position not below the record's
    CHAIN_MISMATCH = "chain_mismatch"  # count or chain digest differ from the parent's


class Note(StrEnum):
    PAYLOAD_RECLAIMED = "payload_reclaimed"
    PAYLOAD_GONE_BEFORE_V6 = "payload_gone_before_v6"
    PLAN_RETIRED = "plan_retired"  # retired by the v5 migration, or linked onto one
    PLAN_UNLINKED = "plan_unlinked"  # the v5 migration found no row to link to
    OPEN_INTENT = "open_intent"  # the next relay start poisons its position


Code = Damage | Note


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One observation row as verify reads it: the record, and what became of its payload.
    ``reclaimed_at``: the cleanup mark (schema v6); ``None``: never reclaimed;
    ``reclaim_marks=False``: a v5 store, which kept no marks."""

    observation: Observation
    reclaimed_at: float | None = None
    payload: bytes | None = None  # the stored bytes, exactly
    payload_size: int | None = None  # the size column
    reclaim_marks: bool = True


def audit_record(
    record: StoredRecord, parent: Observation | None, *, before_v6: float
) -> list[Code]:
    """Every finding for one record; ``parent``: the row its link leads to (``None`` when
    there is no link or no such row). ``before_v6``: the schema's mark for a payload
    already gone when the store was upgraded."""
    found: list[Code] = list(audit_link(record.observation, parent))
    if record.payload is None:
        found += _absent_payload(record, before_v6)
    else:
        found += audit_payload(record.observation, record.payload, record.payload_size)
    return found


def _absent_payload(record: StoredRecord, before_v6: float) -> list[Code]:
    marked = record.reclaim_marks and record.reclaimed_at is not None
    if marked and record.reclaimed_at != before_v6:
        return [Note.PAYLOAD_RECLAIMED]
    if not record.observation.replayable:
        return []  # observed only: it never had a payload (or v5 retired it with one)
    if marked or not record.reclaim_marks:
        return [Note.PAYLOAD_GONE_BEFORE_V6]
    return [Damage.PAYLOAD_MISSING]


def _retired(record: Observation) -> bool:
    """What the v5 migration left in a record it retired: not replayable, no link, the
    retired chain (a damaged plan of a replayable record is damage, not this)."""
    plan = record.prior_plan
    return not record.replayable and plan.parent_id is None and plan.chain == RETIRED_CHAIN


def audit_link(record: Observation, parent: Observation | None) -> list[Code]:
    """The record's prior plan against its parent's chain (see the module docstring)."""
    plan = record.prior_plan
    if plan.parent_id is None:
        if _retired(record):
            return [Note.PLAN_RETIRED]
        if plan.count == 0:
            return [] if plan == EMPTY_PLAN else [Damage.CHAIN_MISMATCH]
        # A plan of blocks whose last block had no row to link to (only the v5 migration
        # writes one: the store refuses it otherwise); its digest must still be one.
        return [Note.PLAN_UNLINKED] if plan.well_formed else [Damage.CHAIN_MISMATCH]
    if parent is None or parent.id != plan.parent_id:
        return [Damage.PARENT_MISSING]
    found: list[Code] = []
    if parent.id >= record.id:
        found.append(Damage.PARENT_NOT_OLDER)
    if parent.scope_id != record.scope_id:
        found.append(Damage.PARENT_OTHER_SCOPE)
    if parent.position >= record.position:
        found.append(Damage.PARENT_NOT_BELOW)
    if parent.chain_plan != plan:
        # The v5 migration may link a record onto one it retired: that chain was cut on
        # purpose (the planner refuses it as reordered), not damaged.
        found.append(Note.PLAN_RETIRED if _retired(parent) else Damage.CHAIN_MISMATCH)
    return found


def audit_payload(record: Observation, payload: bytes, size: int | None) -> list[Code]:
    """A stored payload against its record's digests, its size column and the rules a
    replayable block follows."""
    found: list[Code] = []
    if payload_digests(payload) != (record.payload_fingerprint, record.output_hash):
        found.append(Damage.PAYLOAD_DIGEST_MISMATCH)
    if size != len(payload):
        found.append(Damage.PAYLOAD_SIZE_MISMATCH)
    found += audit_block(payload)
    return found


def audit_block(payload: bytes) -> list[Code]:
    """The block rules: a non-empty JSON array of reasoning, message and function_call
    items, with at least one reasoning item and each carrying non-empty ciphertext, not
    ending in a reasoning item (the upstream refuses one without its following item);
    each function call with a non-empty call id and name and string arguments, no call id
    twice (a tool result pairs with exactly one call) and no item id twice."""
    try:
        items = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return [Damage.PAYLOAD_MALFORMED]
    if not isinstance(items, list) or not items:
        return [Damage.PAYLOAD_MALFORMED]
    found: list[Code] = []
    call_ids: set[Any] = set()
    item_ids: set[str] = set()
    reasoning = 0
    for item in items:
        if not isinstance(item, dict) or item.get("type") not in REPLAYABLE_ITEM_TYPES:
            return [Damage.PAYLOAD_MALFORMED]
        kind = item["type"]
        if kind == "reasoning":
            ciphertext = item.get("encrypted_content")
            if not isinstance(ciphertext, str) or not ciphertext:
                return [Damage.PAYLOAD_MALFORMED]
            reasoning += 1
        elif kind == "function_call" and not _call_ok(item, call_ids):
            found.append(Damage.CALL_PAIRING_BROKEN)
        item_id = item.get("id")
        if isinstance(item_id, str):
            if item_id in item_ids:
                found.append(Damage.DUPLICATE_ITEM)
            item_ids.add(item_id)
    if not reasoning or items[-1].get("type") == "reasoning":
        return [Damage.PAYLOAD_MALFORMED]
    return list(dict.fromkeys(found))  # each code once per record


def _call_ok(item: dict[str, Any], seen: set[Any]) -> bool:
    call_id, name = item.get("call_id"), item.get("name")
    ok = (
        isinstance(call_id, str) and bool(call_id)
        and isinstance(name, str) and bool(name)
        and isinstance(item.get("arguments"), str)
        and call_id not in seen
    )  # fmt: skip
    seen.add(call_id)
    return ok


@dataclass
class AuditTally:
    """Counts by code, with a few example observation ids per code (ids are not secret)."""

    records: int = 0
    payloads: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[int]] = field(default_factory=dict)

    def add(self, code: Code, count: int = 1, *, observation_id: int | None = None) -> None:
        self.counts[code.value] += count
        if observation_id is not None:
            kept = self.examples.setdefault(code.value, [])
            if len(kept) < EXAMPLES_PER_CODE:
                kept.append(observation_id)

    def add_all(self, codes: Iterable[Code], observation_id: int) -> None:
        for code in codes:
            self.add(code, observation_id=observation_id)

    @property
    def damage(self) -> dict[str, int]:
        return {c.value: self.counts[c.value] for c in Damage if self.counts[c.value]}

    @property
    def notes(self) -> dict[str, int]:
        return {c.value: self.counts[c.value] for c in Note if self.counts[c.value]}

    @property
    def damaged(self) -> bool:
        return bool(self.damage)
