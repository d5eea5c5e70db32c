"""A reference model of which cached output blocks may be replayed (design §2-§4).

Used by ``tests/unit/cache/test_replay_state_machine.py`` as the oracle for the real planner,
session and store. It deliberately imports nothing from ``relay``: it speaks of visible
messages (canonical JSON text, as the client sends them) and exact payload bytes, never
of digests, and every rule below is a sentence of docs/design.md (§2-§4, §7):

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
  conflict; seen again with the same payload, plan and generation it is a repeat;
- an offline backup and restore starts a new *epoch*: the copy has a fresh secret, so
  its records and markers belong to scopes no request reaches again (and a coverage gap
  quarantines them besides); nothing recorded before replays, conflicts with, competes
  with or lies beneath anything recorded after, but the payloads stay for retention;
- retention: a payload's touch time moves only forward, and only when it is at least
  the touch granularity (an hour) older than now, so it lags the last use by less than
  that; a payload expires, and cleanup may delete it, once its touch time is older than
  the window plus the granularity, so never before it was unused for the whole window;
  cleanup deletes a payload only when it is idle that long, the deletion barrier is open (30
  days of monotonic time since startup or since the wall clock last went back or drifted
  over 60 s from the monotonic one), no open intent depends on it or produced it, no
  record at the same start keeps a payload still in use, and no record built on it keeps
  its payload; a reclaimed payload never replays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

DAY: Final = 24 * 3600.0
RETENTION: Final = 30 * DAY
GRANULARITY: Final = 3600.0  # a touch within this of the stored one changes nothing
BARRIER: Final = 30 * DAY
DRIFT_LIMIT: Final = 60.0
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
    prior_keys: tuple[int, ...] = ()  # the handles of the records dispatched beneath it
    epoch: int = 0  # backups restored before it was recorded (each copy: a new secret)

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
    used: dict[int, float] = field(default_factory=dict)  # admitted key → its latest use
    latest_snapshot: str | None = None
    reclaimed: set[int] = field(default_factory=set)  # admitted keys whose payload is gone
    pins: dict[str, tuple[int, ...]] = field(default_factory=dict)  # intent → plan keys
    # The deletion barrier: (wall, monotonic) when it began, and the newest reading.
    barrier_since: tuple[float, float] = (0.0, 0.0)
    barrier_last: tuple[float, float] = (0.0, 0.0)
    epoch: int = 0  # the current one (see Record.epoch)
    archived_markers: int = 0  # markers of earlier epochs: still stored, never matched

    # --- queries ------------------------------------------------------------------------

    def at(self, end: History) -> list[Record]:
        """Every record of this epoch ending with ``end``, newest first."""
        return [r for r in reversed(self.records) if r.end == end and r.epoch == self.epoch]

    def by_key(self, key: int) -> Record | None:
        return next((r for r in self.records if r.key == key), None)

    def by_ref(self, ref: Ref, epoch: int | None = None) -> Record | None:
        """The newest record of ``epoch`` (default: this one) with ``ref``."""
        epoch = self.epoch if epoch is None else epoch
        return next((r for r in reversed(self.records) if r.ref == ref and r.epoch == epoch), None)

    def chain(self, record: Record) -> list[Record] | None:
        """The record's recorded ancestors then itself; None when one is unknown."""
        chain = []
        for ref in record.prior:
            ancestor = self.by_ref(ref, record.epoch)
            if ancestor is None:
                return None
            chain.append(ancestor)
        return [*chain, record]

    def _member_ok(self, record: Record, index: int, chain: list[Record], history: History) -> bool:
        return (
            is_prefix(record.end, history)
            and record.epoch == self.epoch
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
            and self.touched.get(record.key, float("-inf")) >= self.now - RETENTION - GRANULARITY
            and record.key not in self.reclaimed
        )

    def _snapshot_ok(self, record: Record) -> bool:
        if record.snapshot == self.latest_snapshot:
            return True
        seen = max(
            r.observed_at for r in self.records
            if r.snapshot == record.snapshot and r.epoch == record.epoch
        )  # fmt: skip
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
            if len(later.end) > last and is_prefix(later.end, history) and later.epoch == self.epoch
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

    def dispatch(
        self, intent: str, start: History, plan: list[Record], validated: Sequence[int] = ()
    ) -> None:
        """A generation goes out with ``plan``; it and every record whose payload passed
        its checks while planning (``validated``) are touched."""
        self.intents[intent] = start
        self.pins[intent] = tuple(record.key for record in plan)
        for record in plan:
            self.touch(record.key)
        for key in validated:
            self.touch(key)

    def touch(self, key: int) -> None:
        if key in self.touched:
            self.used[key] = max(self.used[key], self.now)
            if self.touched[key] < self.now - GRANULARITY:
                self.touched[key] = self.now

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
        prior_keys: tuple[int, ...] = (),
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
            prior_keys=prior_keys,
            epoch=self.epoch,
        )
        self.records.append(record)
        self.latest_snapshot = snapshot
        if record.admitted:
            self.touched[record.key] = self.used[record.key] = self.now
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

    def restored_from_backup(self) -> None:
        """The relay (stopped, no intent open) now runs on a restored backup: a new epoch
        whose one scope starts at generation 1, with no markers and no latest snapshot."""
        assert not self.intents, "a backup is made while the relay is stopped"
        self.archived_markers += len(self.poisoned) + len(self.conflicted) + len(self.rejected)
        self.poisoned, self.conflicted, self.rejected = set(), set(), set()
        self.epoch += 1
        self.generation = 1
        self.latest_snapshot = None

    def resolve(self, intent: str) -> None:
        del self.intents[intent]
        self.pins.pop(intent, None)

    # --- retention ----------------------------------------------------------------------

    def start_barrier(self, wall: float, monotonic: float) -> None:
        """A startup: the barrier begins at this reading."""
        self.barrier_since = self.barrier_last = (wall, monotonic)

    def clock_read(self, wall: float, monotonic: float) -> None:
        """The relay read its clocks: a wall clock behind the last reading, or a
        wall/monotonic offset more than the drift limit from the barrier's, restarts it."""
        since_offset = self.barrier_since[0] - self.barrier_since[1]
        if wall < self.barrier_last[0] or abs(wall - monotonic - since_offset) > DRIFT_LIMIT:
            self.barrier_since = (wall, monotonic)
        self.barrier_last = (wall, monotonic)

    @property
    def barrier_open(self) -> bool:
        return self.barrier_last[1] - self.barrier_since[1] >= BARRIER

    def cleanup(self) -> set[int]:
        """The payloads one cleanup run reclaims (every deletable one: fewer than the
        per-run limit exist here), descendants before ancestors."""
        if not self.barrier_open:
            return set()
        cutoff = self.barrier_last[0] - RETENTION - GRANULARITY
        kept = {key for key in self.touched if key not in self.reclaimed}
        pinned = {key for keys in self.pins.values() for key in keys}
        producing = set(self.intents)
        gone: set[int] = set()
        while True:
            alive = kept - gone
            more = {
                r.key for r in self.records
                if r.key in alive
                and self.touched[r.key] < cutoff
                and r.key not in pinned
                and r.intent not in producing
                and not any(o.key in alive and o.key != r.key and o.start == r.start
                            and o.epoch == r.epoch and self.touched[o.key] >= cutoff
                            for o in self.records)
                and not any(o.key in alive and r.key in o.prior_keys for o in self.records)
            }  # fmt: skip
            if not more:
                self.reclaimed |= gone
                return gone
            gone |= more
