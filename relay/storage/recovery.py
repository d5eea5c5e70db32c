"""Store-wide safety transitions (design §4 end, §7): startup recovery, coverage gaps,
fencing. Each is one transaction, so it happens entirely or not at all.

- *Recovery*: an intent left by an earlier process is a generation whose outcome nobody
  saw; its position is poisoned and the intent removed.
- *Coverage gap*: while caching was off the relay served traffic it did not observe. It is
  recorded (:func:`record_gap`) before the first such request is forwarded, not at
  startup, so a cache-off run that forwards none leaves replay intact. The next enabled
  open advances every scope generation (old records stop replaying; payloads and markers
  stay) and consumes the gap.
- *Fencing*: a generation the relay cannot derive an identity for (direct Responses
  traffic, underivable history) may have extended any conversation of that credential and
  model (and caller, when known): those scopes' unresolved positions are poisoned and their
  generations advanced.
"""

from __future__ import annotations

from dataclasses import dataclass

from relay.core.records import MarkerKind
from relay.core.scope import ScopeTargeting
from relay.storage.interface import ReplayStore

COVERAGE_GAP_KEY = "coverage-gap"


@dataclass(frozen=True)
class OpenReport:
    recovered_intents: int
    gap_consumed: bool
    generations_advanced: int


def recover_intents(store: ReplayStore, now: float) -> int:
    """Poison and remove every unresolved intent (call inside a transaction)."""
    intents = store.unresolved_intents()
    for intent in intents:
        store.add_marker(
            intent.scope_id, MarkerKind.START_POISON, intent.start_digest, intent.position, now
        )
        store.delete_intent(intent.id)
    return len(intents)


def open_enabled(store: ReplayStore, now: float) -> OpenReport:
    """Startup with caching on: recover, then consume a recorded gap."""
    with store.transaction():
        recovered = recover_intents(store, now)
        gap = store.meta(COVERAGE_GAP_KEY) is not None
        advanced = 0
        if gap:
            advanced = store.advance_generations(None)
            store.set_meta(COVERAGE_GAP_KEY, None)
    return OpenReport(recovered, gap, advanced)


def open_disabled(store: ReplayStore, now: float) -> int:
    """Startup with caching off over an existing store: recover. The gap is not recorded
    yet (:func:`record_gap`): this run may forward nothing the cache would have seen."""
    with store.transaction():
        recovered = recover_intents(store, now)
    return recovered


def record_gap(store: ReplayStore) -> None:
    """Record, durably (one committed transaction), that traffic the cache would have
    observed is about to be served unobserved: the next enabled open retires every record."""
    with store.transaction():
        store.set_meta(COVERAGE_GAP_KEY, 1)


def fence(store: ReplayStore, targeting: ScopeTargeting, now: float) -> int:
    """Fence the scopes an unobservable generation may touch; how many were fenced."""
    with store.transaction():
        scopes = store.scopes_targeted(
            credential=targeting.credential, model=targeting.model, caller=targeting.caller
        )
        wanted = set(scopes)
        for intent in store.unresolved_intents():
            if intent.scope_id in wanted:
                store.add_marker(
                    intent.scope_id,
                    MarkerKind.START_POISON,
                    intent.start_digest,
                    intent.position,
                    now,
                )
        store.advance_generations(scopes)
    return len(scopes)
