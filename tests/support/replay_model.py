"""A reference model of which cached output blocks may be replayed (design §2-§4).

Used by ``tests/unit/cache/test_replay_state_machine.py`` as the oracle for the real planner,
session and store. It deliberately imports nothing from ``relay``: it speaks of visible
messages (canonical JSON text, as the client sends them) and exact payload bytes, never
of digests, and every rule below is a sentence of the spec:

- a record is one observed generation: the request history it was made for (``start``),
  the visible assistant message the client got (``envelope``), the exact original output
  (``payload``), the plan dispatched with it (``prior``), its generation and intent;
- a block may replay only inside a chain ``prior + [record]`` whose members all sit in the
  visible history at their recorded places, were admitted in the current generation, carry
  intact bytes, have no conflict at their end and no poison at their start, have no other
  unresolved generation at their start, are not idle longer than the retention window, and
  whose plan-determining record has an accepted model snapshot;
- nothing is replayed beneath a later record (of this history) generated without it;
- the same visible identity seen with a different payload or a different prior plan is a
  conflict; seen again with the same payload, plan and generation it is a repeat.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

DAY: Final = 24 * 3600.0
RETENTION: Final = 30 * DAY
SNAPSHOT_WINDOW: Final = DAY

History = tuple[str, ...]  # visible messages, each as canonical JSON
Ref = tuple[History, str]  # (history ending with the assistant message, payload JSON)


def is_prefix(prefix: History, history: History) -> bool:
    return len(prefix) <= len(history) and history[: len(prefix)] == prefix


@dataclass(frozen=True)
class Record:
    key: int  # the handle the store gives it (observation id)
    start: History  # the request history it was generated for
    envelope: str  # the visible assistant message the client got back
    payload: str  # the exact original output JSON
    prior: tuple[Ref, ...]  # the replay plan dispatched when it was generated
    generation: int
    admitted: bool
    intent: str
    snapshot: str
    observed_at: float

    @property
    def end(self) -> History:
        return (*self.start, self.envelope)

    @property
    def ref(self) -> Ref:
        return (self.end, self.payload)


@dataclass(frozen=True)
class Observed:
    """What observing one generation did: a new record (or a repeat), and a conflict."""

    record: Record | None  # None: a repeat of an existing record, nothing new
    conflict: bool


@dataclass
class Model:
    now: float
    generation: int = 1
    records: list[Record] = field(default_factory=list)  # oldest first
    conflicted: set[History] = field(default_factory=set)  # end histories
    poisoned: set[History] = field(default_factory=set)  # start histories
    rejected: set[History] = field(default_factory=set)  # end histories the upstream refused
    tampered: set[int] = field(default_factory=set)  # record keys with damaged bytes
    intents: dict[str, History] = field(default_factory=dict)  # unresolved: id → start
    touched: dict[int, float] = field(default_factory=dict)  # admitted key → touched_at
    latest_snapshot: str | None = None

    # --- queries ------------------------------------------------------------------------

    def at(self, end: History) -> list[Record]:
        """Every record ending with ``end``, newest first."""
        return [r for r in reversed(self.records) if r.end == end]

    def by_key(self, key: int) -> Record | None:
        return next((r for r in self.records if r.key == key), None)

    def by_ref(self, ref: Ref) -> Record | None:
        return next((r for r in reversed(self.records) if r.ref == ref), None)

    def chain(self, record: Record) -> list[Record] | None:
        """The record's recorded ancestors then itself; None when one is unknown."""
        chain = []
        for ref in record.prior:
            ancestor = self.by_ref(ref)
            if ancestor is None:
                return None
            chain.append(ancestor)
        return [*chain, record]

    def _member_ok(self, record: Record, index: int, chain: list[Record], history: History) -> bool:
        return (
            is_prefix(record.end, history)
            and record.prior == tuple(member.ref for member in chain[:index])
            and record.admitted
            and record.generation == self.generation
            and record.key not in self.tampered
            and record.end not in self.conflicted
            and record.end not in self.rejected
            and record.start not in self.poisoned
            and not any(
                start == record.start and intent != record.intent
                for intent, start in self.intents.items()
            )
            and self.touched.get(record.key, float("-inf")) >= self.now - RETENTION
        )

    def _snapshot_ok(self, record: Record) -> bool:
        if record.snapshot == self.latest_snapshot:
            return True
        seen = max(r.observed_at for r in self.records if r.snapshot == record.snapshot)
        return seen >= self.now - SNAPSHOT_WINDOW

    def replayable(self, chain: list[Record], history: History) -> bool:
        """Whether ``chain`` may replace its assistant messages in ``history``."""
        if not chain or not self._snapshot_ok(chain[-1]):
            return False
        if not all(self._member_ok(r, i, chain, history) for i, r in enumerate(chain)):
            return False
        refs = [member.ref for member in chain]
        last = len(chain[-1].end)
        return all(
            list(later.prior[: len(refs)]) == refs
            for later in self.records
            if len(later.end) > last and is_prefix(later.end, history)
        )

    def expected(self, history: History, assistant_positions: Sequence[int]) -> list[Record] | None:
        """The plan the relay must choose, when the model is sure of it; None otherwise.

        Sure means: the newest record at the last assistant message of ``history`` that
        has any record is admitted and its whole chain is replayable (nothing ambiguous
        happened to it), or nothing at all was recorded for this history (no replay).
        """
        for position in reversed(assistant_positions):
            found = self.at(history[: position + 1])
            if found:
                chain = self.chain(found[0])
                if chain is not None and self.replayable(chain, history):
                    return chain
                return None
        return []

    # --- transitions --------------------------------------------------------------------

    def dispatch(self, intent: str, start: History, plan: list[Record]) -> None:
        self.intents[intent] = start
        for record in plan:
            self.touch(record.key)

    def touch(self, key: int) -> None:
        if key in self.touched:
            self.touched[key] = max(self.touched[key], self.now)

    def observe(
        self,
        *,
        start: History,
        envelope: str,
        payload: str,
        admissible: bool,
        prior: tuple[Ref, ...],
        generation: int,
        intent: str,
        snapshot: str,
    ) -> Observed:
        end = (*start, envelope)
        existing = self.at(end)
        conflict = any(r.payload != payload or r.prior != prior for r in existing)
        if conflict:
            self.conflicted.add(end)
        same = [
            r for r in existing
            if r.payload == payload and r.prior == prior and r.generation == generation
        ]  # fmt: skip
        if same:
            for record in same:
                self.touch(record.key)
            return Observed(None, conflict)
        record = Record(
            key=len(self.records) + 1,  # observation ids: AUTOINCREMENT from 1, one scope
            start=start,
            envelope=envelope,
            payload=payload,
            prior=prior,
            generation=generation,
            admitted=admissible and not conflict,
            intent=intent,
            snapshot=snapshot,
            observed_at=self.now,
        )
        self.records.append(record)
        self.latest_snapshot = snapshot
        if record.admitted:
            self.touched[record.key] = self.now
        return Observed(record, conflict)

    def reject(self, plan: list[Record], intent: str, resend: str | None, start: History) -> None:
        """The upstream refused the replayed ``plan``: each block's end is retired, and the
        intent moves to the resend (no replay), or is resolved when there is none."""
        self.rejected.update(record.end for record in plan)
        self.resolve(intent)
        if resend is not None:
            self.dispatch(resend, start, [])

    def poison(self, start: History) -> None:
        self.poisoned.add(start)

    def resolve(self, intent: str) -> None:
        del self.intents[intent]
