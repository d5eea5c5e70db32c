"""Which stored output blocks may replace which visible assistant messages (design §3).

Pure decision code over a :class:`RecordSource` (the store, bound to one scope, or a test
double). The planner starts from the newest record matching an assistant message of the
visible history. Its proposed plan is that record's recorded ancestors (the exact plan
dispatched when it was generated, reached by walking its parent links and proven by
re-deriving each link's chain digest) followed by the record itself. Every block of the plan
must be in this very history at its recorded position, hold intact bytes, carry no marker,
belong to the scope's current generation, and pair its calls with the visible ones. When
the newest plan fails, older candidates are tried; a plan is never placed under a later
record that was generated without it. Anything doubtful means no replay plus a receipt.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final, NamedTuple, Protocol

import orjson

from relay.core.deletion_barrier import DAY_S
from relay.core.history_digest import AssistantBlockKey, HistoryDigests
from relay.core.hot_blocks import HotBlocks, VerifiedPayload
from relay.core.json_bytes import RawItems
from relay.core.plan_memo import ChainVerdict, PlanMemo
from relay.core.receipts import Reason
from relay.core.records import (
    EMPTY_PLAN,
    BlockRef,
    Observation,
    OversizedPayload,
    PriorPlan,
    StoredPayload,
    chain_digest,
    idle_window_s,
)
from relay.errors import InternalSignal

REPLAYABLE_ITEM_TYPES: Final = frozenset(
    {"reasoning", "message", "function_call", "custom_tool_call"}
)
# A call item's kind as its visible tool call has it (``type`` of a Chat tool call).
CALL_KINDS: Final = {"function_call": "function", "custom_tool_call": "custom"}


class RecordSource(Protocol):
    """Read access to one scope's records (all generations)."""

    def observations_ending_at(
        self, end_digests: Iterable[str]
    ) -> Mapping[str, Sequence[Observation]]:
        """Every record ending at each of ``end_digests``, newest first (a digest no record
        ends at may be absent), read in a few queries."""

    def ends_with_records(self, end_digests: Iterable[str]) -> set[str]:
        """Those of ``end_digests`` that at least one record ends at (only whether: no
        record is read), in a few queries."""

    def lineage(self, observation_id: int, limit: int) -> Sequence[Observation]:
        """The record ``observation_id`` and up to ``limit - 1`` more up its parent links,
        nearest first, as far as they lead (the planner checks every link itself)."""

    def observations_by_id(self, observation_ids: Iterable[int]) -> Sequence[Observation]:
        """The records with these ids (an id no record of the scope has is left out), in
        any order, in a few queries: the ancestors a remembered chain names."""

    def poisoned_starts(self, start_digests: Iterable[str]) -> set[str]: ...
    def conflicted_ends(self, end_digests: Iterable[str]) -> set[str]: ...
    def rejected_ends(self, end_digests: Iterable[str]) -> set[str]: ...
    def unresolved_intents_at(self, start_digests: Iterable[str]) -> Mapping[str, set[str]]:
        """The open intents at each start digest that has any."""

    def latest_snapshot(self) -> str | None: ...
    def snapshot_last_seen(self, snapshot: str) -> float | None: ...
    def load_payloads(
        self, observation_ids: Iterable[int], *, max_bytes: int
    ) -> Mapping[int, StoredPayload | OversizedPayload]:
        """Each stored payload (absent: none), or :class:`OversizedPayload` over ``max_bytes``."""


@dataclass(frozen=True)
class PlanLimits:
    max_plan_records: int = 256
    max_replay_bytes: int = 16 * 1024 * 1024  # distinct serialized payload bytes
    retention_s: float = 30 * DAY_S  # sliding idle window of a payload (see idle_window_s)
    snapshot_window_s: float = DAY_S


@dataclass(frozen=True)
class Rejection:
    """A receipt: why a candidate plan was not replayed (no payload content)."""

    reason: Reason
    position: int
    observation_id: int | None = None


class SelectedBlock(NamedTuple):  # a named tuple: a plan selects hundreds per request
    observation: Observation
    payload: VerifiedPayload

    @property
    def text(self) -> bytes:
        """The original output items as stored: the JSON array text (UTF-8) that is
        replayed."""
        return self.payload.text

    @property
    def size(self) -> int:
        """Serialized payload bytes."""
        return self.payload.size

    @property
    def items(self) -> RawItems:
        """The stored text's items, to splice into the upstream body as they are."""
        return self.payload.items or RawItems(self.payload.text)


@dataclass(frozen=True)
class Plan:
    blocks: tuple[SelectedBlock, ...] = ()  # ancestors first, positions increasing
    rejections: tuple[Rejection, ...] = ()
    # Visible assistant messages no record ends at (an echo the relay did not predict, an
    # edit, an answer it never saw): "why no replay?" for a message with no receipt. When
    # the verification budget ran out, only the messages examined before.
    unmatched: int = 0
    # Records whose payload passed every check while planning (the selected ones and any
    # inspected for a candidate that failed later): retention touches them all.
    validated: tuple[int, ...] = ()
    # The stored touch of each validated record as this planning read it (same order):
    # the dispatch rewrites only those older than the touch granularity (due_touches).
    touched: tuple[float, ...] = ()

    def due_touches(self, stale: float) -> tuple[int, ...]:
        """The validated records whose stored touch, as read in this planning's
        transaction, is older than ``stale``: the only rows a touch would rewrite. Without
        the stored touches (a plan built elsewhere), all of them (the store filters)."""
        if len(self.touched) != len(self.validated):
            return self.validated
        return tuple(
            observation_id
            for observation_id, touched_at in zip(self.validated, self.touched, strict=True)
            if touched_at < stale
        )

    @property
    def refs(self) -> tuple[BlockRef, ...]:
        return tuple(block.observation.ref for block in self.blocks)

    @cached_property
    def stored(self) -> PriorPlan:
        """The plan as the store keeps it: the prior plan of what it is dispatched for (a
        link to its last block, whose own chain the planner verified)."""
        return self.blocks[-1].observation.chain_plan if self.blocks else EMPTY_PLAN

    @property
    def replay_bytes(self) -> int:
        return sum(block.size for block in self.blocks)


class _Rejected(InternalSignal):
    def __init__(self, reason: Reason, observation: Observation | None = None) -> None:
        super().__init__(reason.value)
        self.reason = reason
        self.observation = observation


class _BudgetExhausted(InternalSignal):
    pass


@dataclass
class _Planning:
    """One synchronous planning operation: loads and verdicts are shared inside it only."""

    history: HistoryDigests
    messages: Sequence[Any]
    source: RecordSource
    generation: int
    now: float
    limits: PlanLimits
    hot: HotBlocks | None
    memo: PlanMemo | None = None
    work: int = 0
    # A payload whose stored touch is older than this has expired (the same bound for
    # every block of this planning: ``now`` less the idle window).
    expired_before: float = 0.0
    blocks_by_position: dict[int, AssistantBlockKey] = field(default_factory=dict)
    verified: dict[int, SelectedBlock] = field(default_factory=dict)
    by_id: dict[int, Observation] = field(default_factory=dict)
    absent: set[int] = field(default_factory=set)  # ids a lineage read did not find
    ending_at: dict[str, Sequence[Observation]] = field(default_factory=dict)

    def records_at(self, end_digest: str) -> Sequence[Observation]:
        """The records ending at ``end_digest`` (read once per planning)."""
        if end_digest not in self.ending_at:
            self.read_ends([end_digest])
        return self.ending_at[end_digest]

    def read_ends(self, end_digests: Iterable[str]) -> None:
        """Read the records of every digest not read yet, in one batch: one query for
        the messages a step needs instead of one per message."""
        unread = [digest for digest in dict.fromkeys(end_digests) if digest not in self.ending_at]
        if unread:
            found = self.source.observations_ending_at(unread)
            for digest in unread:
                self.ending_at[digest] = found.get(digest, ())

    payloads: dict[int, StoredPayload | OversizedPayload | None] = field(default_factory=dict)

    def ancestors(self, record: Observation, count: int) -> list[Observation]:
        """Up to ``count`` records up ``record``'s parent links, nearest first; fewer where
        a link is broken (no such row, or a parent not older than its child, which also
        rules out cycles). Rows are read in one query per unread stretch of the chain; a
        row this planning already read (for another candidate) is not read again."""
        found: list[Observation] = []
        child = record
        while len(found) < count:
            parent_id = child.prior_plan.parent_id
            if parent_id is None or parent_id >= child.id or parent_id in self.absent:
                break
            parent = self.by_id.get(parent_id)
            if parent is None:
                for row in self.source.lineage(parent_id, count - len(found)):
                    self.by_id.setdefault(row.id, row)
                parent = self.by_id.get(parent_id)
                if parent is None:
                    self.absent.add(parent_id)
                    break
            found.append(parent)
            child = parent
        return found

    def load_payloads(self, records: Sequence[Observation]) -> None:
        """Read the payloads of ``records`` not read yet (for another candidate), in one
        batch, into :attr:`payloads`."""
        unread = [record.id for record in records if record.id not in self.payloads]
        if unread:
            found = self.source.load_payloads(unread, max_bytes=self.limits.max_replay_bytes)
            for observation_id in unread:
                self.payloads[observation_id] = found.get(observation_id)

    def spend(self) -> None:
        self.work += 1
        if self.work > 4 * self.limits.max_plan_records:
            raise _BudgetExhausted


def plan_replay(
    history: HistoryDigests,
    messages: Sequence[Any],
    source: RecordSource,
    *,
    generation: int,
    now: float,
    limits: PlanLimits = PlanLimits(),
    hot: HotBlocks | None = None,
    memo: PlanMemo | None = None,
) -> Plan:
    """The replay plan for one visible history (``messages`` as the client sent them).
    ``hot`` is the hot cache to use and fill (none: every payload is read and verified);
    ``memo`` the chain verdicts to use and fill (none: every chain is checked in full).
    Either one changes what is derived again, never the plan."""
    state = _Planning(history, messages, source, generation, now, limits, hot, memo)
    state.expired_before = now - idle_window_s(limits.retention_s)
    state.blocks_by_position = {block.position: block for block in history.assistant_blocks}
    rejections: list[Rejection] = []
    unmatched = 0
    try:
        blocks = history.assistant_blocks
        last = len(blocks) - 1
        unread = last  # blocks[: unread + 1] are not read yet
        for index in range(last, -1, -1):
            block = blocks[index]
            if index <= unread:
                # The newest message alone first (it usually decides); then batches as
                # large as everything read so far (at least 16): a few queries however
                # far back the plan starts, and little read below it.
                size = 1 if index == last else max(16, last - index)
                low = max(0, index - size + 1)
                state.read_ends(b.end_digest for b in blocks[low : index + 1])
                unread = low - 1
            records = state.records_at(block.end_digest)
            unmatched += not records
            for record in records:
                state.spend()
                try:
                    chain = _plan_for(state, block, record)
                except _Rejected as err:
                    failed = err.observation or record
                    rejections.append(Rejection(err.reason, failed.position, failed.id))
                    continue
                below = _unmatched_below(state, index, chain)
                return Plan(
                    chain, tuple(rejections), unmatched + below, *_validated(state)
                )  # fmt: skip
    except _BudgetExhausted:
        position = history.assistant_blocks[-1].position if history.assistant_blocks else 0
        rejections.append(Rejection(Reason.VERIFICATION_BUDGET, position))
    return Plan((), tuple(rejections), unmatched, *_validated(state))


def _validated(state: _Planning) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The validated records and their stored touches as read (``Plan.touched``)."""
    ids = tuple(state.verified)
    touched = []
    for observation_id in ids:
        row = state.payloads[observation_id]
        assert isinstance(row, StoredPayload), "a validated record has its payload"
        touched.append(row.touched_at)
    return ids, tuple(touched)


def _unmatched_below(state: _Planning, index: int, chain: Sequence[SelectedBlock]) -> int:
    """How many assistant messages before ``assistant_blocks[index]`` (the plan's last
    block) no record ends at. Each chain member has one; only a message the chain skips
    (one its last block was generated without) is looked up, and only for the count: by
    existence, not by reading its records (a diagnostic must not cost a read of every
    record below a long plan)."""
    in_plan = {block.observation.position for block in chain}
    skipped = [
        b.end_digest for b in state.history.assistant_blocks[:index] if b.position not in in_plan
    ]
    known = state.ending_at
    unread = [digest for digest in skipped if digest not in known]
    matched = {digest for digest in skipped if known.get(digest)}
    if unread:
        matched |= state.source.ends_with_records(unread)
    return sum(digest not in matched for digest in skipped)


def _plan_for(
    state: _Planning, block: AssistantBlockKey, record: Observation
) -> tuple[SelectedBlock, ...]:
    plan = record.prior_plan
    if plan.count + 1 > state.limits.max_plan_records:
        raise _Rejected(Reason.PLAN_TOO_LONG, record)
    # A damaged plan: nothing beneath this record is known.
    if not plan.well_formed:
        raise _Rejected(Reason.NOT_REPLAYABLE, record)
    _check_snapshot(state, record)
    verdict = _remembered(state, record)
    ancestors = state.ancestors(record, plan.count)
    chain = [*reversed(ancestors), record]
    # The oldest ``proven`` members are a remembered chain's very rows: their links and
    # order passed (plan_memo); the rest are derived here, nearest first as always.
    proven = verdict.proves(chain) if verdict is not None else 0
    unproven_links = len(chain) - proven if proven else len(ancestors)
    child = record
    for index, ancestor in enumerate(ancestors):
        state.spend()
        # Each link must be the plan its child recorded: one block shorter, and the same
        # chain digest once the ancestor's own ref is folded in.
        if index < unproven_links and not _links(ancestor, child):
            raise _Rejected(Reason.ANCESTOR_REORDERED, ancestor)
        child = ancestor
    if len(ancestors) < plan.count:
        raise _Rejected(Reason.ANCESTOR_MISSING, record)
    positions = [member.position for member in chain[max(proven - 1, 0) :]]
    if positions != sorted(set(positions)):
        raise _Rejected(Reason.ANCESTOR_REORDERED, record)
    intents = state.source.unresolved_intents_at({member.start_digest for member in chain})
    for member in chain:
        _check_identity(state, member, intents.get(member.start_digest, _NO_INTENTS))
    _check_markers(state, chain)
    _check_descendants(state, record, record.chain_plan)
    state.load_payloads(chain)
    selected = tuple([_verified_block(state, member) for member in chain])
    if sum([block.payload.size for block in selected]) > state.limits.max_replay_bytes:
        raise _Rejected(Reason.REPLAY_TOO_LARGE, record)
    item_keys = tuple([block.payload.item_keys for block in selected])
    if verdict is None or not proven or item_keys[:proven] != verdict.item_keys[:proven]:
        verdict, proven = None, 0  # the item ids are checked in full
    _check_unique_items(selected[proven:], verdict.keys if verdict is not None else frozenset())
    if state.memo is not None:
        if proven:
            state.memo.hits += 1
        if verdict is None or proven < len(chain):
            state.memo.put(_verdict_of(chain, item_keys, verdict, proven))
    return selected


def _remembered(state: _Planning, record: Observation) -> ChainVerdict | None:
    """The remembered verdict of ``record``'s chain, or else of its parent's (the previous
    turn's plan); the rows it names beneath ``record`` are read now, in one query, for
    :meth:`_Planning.ancestors` to find (the same rows its walk would read)."""
    memo = state.memo
    if memo is None:
        return None
    parent_id = record.prior_plan.parent_id
    verdict = memo.get(record.id)
    if verdict is None and parent_id is not None:
        verdict = memo.get(parent_id)
    if verdict is None:
        return None
    members = verdict.chain[:-1] if verdict.chain[-1].id == record.id else verdict.chain
    count = record.prior_plan.count
    wanted = [
        member.id
        for member in members[max(0, len(members) - count) :]
        if member.id not in state.by_id and member.id not in state.absent
    ]
    if wanted:
        for row in state.source.observations_by_id(wanted):
            state.by_id.setdefault(row.id, row)
    return verdict


def _verdict_of(
    chain: Sequence[Observation],
    item_keys: tuple[tuple[tuple[str, str], ...], ...],
    verdict: ChainVerdict | None,
    proven: int,
) -> ChainVerdict:
    """The verdict of a chain that passed: ``verdict``'s item ids (its first ``proven``
    members') and the rest."""
    keys = verdict.keys if verdict is not None else frozenset()
    added = [key for member_keys in item_keys[proven:] for key in member_keys]
    return ChainVerdict(tuple(chain), item_keys, keys.union(added))


def _links(parent: Observation, child: Observation) -> bool:
    """Whether ``parent`` is the last block of the plan ``child`` recorded."""
    plan = parent.prior_plan
    # No well-formedness check needed: a damaged digest cannot hash to the child's.
    return (
        plan.count == child.prior_plan.count - 1
        and chain_digest(plan.chain, parent.ref) == child.prior_plan.chain
    )


def _check_snapshot(state: _Planning, record: Observation) -> None:
    """The record that determines the plan must come from an accepted model snapshot:
    the scope's latest one, or one seen within the snapshot window."""
    if record.snapshot is None or record.snapshot == state.source.latest_snapshot():
        return
    seen = state.source.snapshot_last_seen(record.snapshot)
    if seen is None or seen < state.now - state.limits.snapshot_window_s:
        raise _Rejected(Reason.SNAPSHOT_NOT_ACCEPTED, record)


_NO_INTENTS: Final[frozenset[str]] = frozenset()


def _check_identity(
    state: _Planning, record: Observation, open_intents: set[str] | frozenset[str]
) -> None:
    block = state.blocks_by_position.get(record.position)
    if block is None or block.end_digest != record.end_digest:
        raise _Rejected(Reason.ANCESTOR_MISSING, record)
    if (
        block.start_digest != record.start_digest
        or block.envelope_fingerprint != record.envelope_fingerprint
    ):
        raise _Rejected(Reason.ENVELOPE_MISMATCH, record)
    if record.generation != state.generation:
        raise _Rejected(Reason.STALE_GENERATION, record)
    if not record.replayable:
        raise _Rejected(Reason.NOT_REPLAYABLE, record)
    if open_intents - {record.intent_id}:
        raise _Rejected(Reason.COMPETING_INTENT, record)


def _check_markers(state: _Planning, chain: Sequence[Observation]) -> None:
    poisoned = state.source.poisoned_starts(member.start_digest for member in chain)
    conflicted = state.source.conflicted_ends(member.end_digest for member in chain)
    rejected = state.source.rejected_ends(member.end_digest for member in chain)
    for member in chain:
        if member.start_digest in poisoned:
            raise _Rejected(Reason.START_POISONED, member)
        if member.end_digest in conflicted:
            raise _Rejected(Reason.END_CONFLICT, member)
        if member.end_digest in rejected:
            raise _Rejected(Reason.UPSTREAM_REJECTED, member)


def _check_descendants(state: _Planning, head: Observation, chain_plan: PriorPlan) -> None:
    """Every record at a later assistant message of this history must have been generated
    on top of this chain (``chain_plan``, ending with ``head``); otherwise the chain would
    sit beneath a descendant that never saw it."""
    known: dict[int, bool] = {}  # verdicts of records walked through, for this chain
    later_blocks = [b for b in state.history.assistant_blocks if b.position > head.position]
    state.read_ends(block.end_digest for block in later_blocks)
    for block in later_blocks:
        for later in state.records_at(block.end_digest):
            state.spend()
            if not _descends(state, later, chain_plan, known):
                raise _Rejected(Reason.DESCENDANT_WITHOUT_BLOCK, later)


def _descends(
    state: _Planning, later: Observation, chain_plan: PriorPlan, known: dict[int, bool]
) -> bool:
    """Whether ``later``'s recorded plan starts with ``chain_plan``. Its links are walked
    down to the one whose plan is as long as ``chain_plan``, each checked as the planner
    checks an ancestor; a broken or damaged link says nothing about what ``later`` saw, so
    it counts as not descending. Past the plan limit every later record was dispatched on
    the chain itself, so its own prior plan is compared, with no walk."""
    depth = max(0, later.prior_plan.count - chain_plan.count)
    ancestors = iter(state.ancestors(later, depth))
    path: list[Observation] = []
    record = later
    while True:
        path.append(record)
        plan = record.prior_plan
        if record.id in known:
            verdict = known[record.id]
            break
        if plan.count <= chain_plan.count:
            verdict = plan.count == chain_plan.count and plan.chain == chain_plan.chain
            break
        parent = next(ancestors, None)
        if parent is None or not _links(parent, record):
            verdict = False
            break
        record = parent
    for record in path:
        known[record.id] = verdict
    return verdict


def _verified_block(state: _Planning, record: Observation) -> SelectedBlock:
    cached = state.verified.get(record.id)
    if cached is not None:
        return cached
    row = state.payloads[record.id]  # read by _plan_for, with the rest of its chain
    if isinstance(row, OversizedPayload):
        raise _Rejected(Reason.REPLAY_TOO_LARGE, record)
    if row is None:
        raise _Rejected(Reason.PAYLOAD_MISSING, record)
    if row.touched_at < state.expired_before:
        raise _Rejected(Reason.RECORD_EXPIRED, record)
    payload = None
    if state.hot is not None:
        payload = state.hot.get(record.id, record.output_hash, row.output_json)
    if payload is None:
        payload = _verify_payload(row, record)
        if state.hot is not None:
            state.hot.put(record.id, payload)
    _check_call_pairing(payload.calls, state.messages, state.history.first_answers, record)
    selected = SelectedBlock(record, payload)
    state.verified[record.id] = selected
    return selected


def _verify_payload(row: StoredPayload, record: Observation) -> VerifiedPayload:
    """Every check of a payload that depends only on its bytes."""
    raw = row.output_json
    if hashlib.sha256(raw).hexdigest() != record.output_hash:
        raise _Rejected(Reason.PAYLOAD_DIGEST_MISMATCH, record)
    calls, keys = _check_block(raw, record)
    return VerifiedPayload(raw, record.output_hash, len(raw), calls, keys, RawItems(raw))


def _check_block(
    output_json: bytes, record: Observation
) -> tuple[tuple[tuple[Any, ...], ...], tuple[tuple[str, str], ...]]:
    """A well-formed block's calls ((kind, call_id, name), in order; kind function or
    custom) and item keys (("id" |
    "call_id", value)). Parsed only to be checked: the text itself is what is replayed, so
    orjson's reading of numbers (it turns integers beyond 64 bits into floats) never
    reaches the upstream, and what it refuses (NaN, lone surrogates) was never stored."""
    try:
        items = orjson.loads(output_json)
    except orjson.JSONDecodeError:
        raise _Rejected(Reason.PAYLOAD_MALFORMED, record) from None
    if not isinstance(items, list) or not items:
        raise _Rejected(Reason.PAYLOAD_MALFORMED, record)
    has_reasoning = False
    calls: list[tuple[Any, ...]] = []
    keys: list[tuple[str, str]] = []
    for item in items:
        if not isinstance(item, dict) or (kind := item.get("type")) not in REPLAYABLE_ITEM_TYPES:
            raise _Rejected(Reason.PAYLOAD_MALFORMED, record)
        if kind == "reasoning":
            ciphertext = item.get("encrypted_content")
            if not isinstance(ciphertext, str) or not ciphertext:
                raise _Rejected(Reason.PAYLOAD_MALFORMED, record)
            has_reasoning = True
        elif kind in CALL_KINDS:
            calls.append((CALL_KINDS[kind], item.get("call_id"), item.get("name")))
        for key in ("id", "call_id"):
            if isinstance(value := item.get(key), str):
                keys.append((key, value))
    if not has_reasoning:
        raise _Rejected(Reason.PAYLOAD_MALFORMED, record)
    return tuple(calls), tuple(keys)


def _check_call_pairing(
    calls: Sequence[tuple[Any, ...]],
    messages: Sequence[Any],
    first_answers: Mapping[str, int],
    record: Observation,
) -> None:
    """The block's calls (kinds, ids and names, in order) must be exactly the visible
    message's calls (a custom_tool_call item is a tool call of type custom, whose name is
    under ``custom``), and each must be answered by a tool result after it and never
    before it."""
    message = messages[record.position]
    tool_calls = message.get("tool_calls")
    if not calls and not tool_calls:
        return  # no call on either side: nothing to pair
    visible = []
    for call in tool_calls or []:
        kind = "custom" if isinstance(call, dict) and call.get("type") == "custom" else "function"
        named = call.get(kind) if isinstance(call, dict) else None
        name = named.get("name") if isinstance(named, dict) else None
        visible.append((kind, call.get("id") if isinstance(call, dict) else None, name))
    if list(calls) != visible:
        raise _Rejected(Reason.CALL_PAIRING_BROKEN, record)
    for _, call_id, _ in calls:
        answered_at = first_answers.get(call_id) if isinstance(call_id, str) else None
        if answered_at is None or answered_at < record.position:
            raise _Rejected(Reason.CALL_PAIRING_BROKEN, record)


def _check_unique_items(
    selected: Sequence[SelectedBlock], earlier: frozenset[tuple[str, str]] = frozenset()
) -> None:
    """No item id twice among ``selected`` and the blocks before them (``earlier``: their
    keys, already found distinct)."""
    seen: set[tuple[str, str]] = set()
    for block in selected:
        for key in block.payload.item_keys:
            if key in seen or key in earlier:
                raise _Rejected(Reason.DUPLICATE_ITEM, block.observation)
            seen.add(key)
