"""Named reasons for not replaying (or not admitting), the one documented list.

Every refusal yields no replay (or no admission) plus one of these codes: counted in
runtime metrics and logged with ids and digests prefixes only, never the payload. The
docs/replay-cache.md lists them too; ``tests/unit/core/test_receipts.py`` keeps both in step.
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    # --- integrity of stored state (replay-envelope guide: tamper, drop, reorder, dup, expiry)
    PAYLOAD_DIGEST_MISMATCH = "payload_digest_mismatch"  # stored bytes differ from their hash
    PAYLOAD_MISSING = "payload_missing"  # record says replayable, payload row is gone
    PAYLOAD_MALFORMED = "payload_malformed"  # stored JSON is not a valid output block
    CALL_PAIRING_BROKEN = "call_pairing_broken"  # calls ≠ visible ones, or unanswered
    ANCESTOR_MISSING = "ancestor_missing"  # a recorded ancestor is not in this history or store
    ANCESTOR_REORDERED = "ancestor_reordered"  # ancestors out of position order, or plan mismatch
    DUPLICATE_ITEM = "duplicate_item"  # one item id would be sent twice
    RECORD_EXPIRED = "record_expired"  # payload idle longer than the retention window
    # --- identity and safety state
    ENVELOPE_MISMATCH = "envelope_mismatch"  # start boundary or envelope fingerprint differs
    STALE_GENERATION = "stale_generation"  # recorded before the scope's current generation
    START_POISONED = "start_poisoned"  # unknown output was generated at that position
    END_CONFLICT = "end_conflict"  # two different payloads for the same visible message
    NOT_REPLAYABLE = "not_replayable"  # never admitted, or its stored plan is damaged
    COMPETING_INTENT = "competing_intent"  # another generation is in flight at that position
    SNAPSHOT_NOT_ACCEPTED = "snapshot_not_accepted"  # model snapshot neither latest nor recent
    DESCENDANT_WITHOUT_BLOCK = "descendant_without_block"  # a later record was made without it
    UPSTREAM_REJECTED = "upstream_rejected"  # the upstream refused it when it was replayed
    # --- budgets (cache-state dependent: observation continues, replay does not)
    PLAN_TOO_LONG = "plan_too_long"  # more than the plan record limit
    REPLAY_TOO_LARGE = "replay_too_large"  # distinct payload bytes over the replay ceiling
    VERIFICATION_BUDGET = "verification_budget"  # planner search exceeded its work budget
    MEMORY_PRESSURE = "memory_pressure"  # the session allowance cannot grow to the replay
    CAPACITY_BYPASS = "capacity_bypass"  # no session to spare: served uncached, poisoned
    # --- capture / admission
    CANONICAL_LIMIT = "canonical_limit"  # history over the canonical limits: caching skipped
    UNDERIVABLE_HISTORY = "underivable_history"  # Responses-shaped input with no exact mapping
    UNKNOWN_PREDICTION = "unknown_prediction"  # client's next envelope cannot be predicted
    PROJECTION_MISMATCH = "projection_mismatch"  # original block ≠ what the client was sent
    CIPHERTEXT_MISMATCH = "ciphertext_mismatch"  # done vs completed differ beyond ciphertext
    INCOMPLETE_RESPONSE = "incomplete_response"  # failed, incomplete or interrupted output
    UNSUPPORTED_OUTPUT = "unsupported_output"  # output item types the relay cannot replay
    NO_REASONING = "no_reasoning"  # completed without encrypted reasoning: observed only
    EMPTY_ENVELOPE = "empty_envelope"  # nothing visible to match later: observed only
    REFUSAL = "refusal"  # how a client echoes a refusal is unknown: poisons
    CAPTURE_EXHAUSTED = "capture_exhausted"  # output over the entry allowance: poisons
    DISK_PRESSURE = "disk_pressure"  # disk limit, low free space or reserve spent: observed only
