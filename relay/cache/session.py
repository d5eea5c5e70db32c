"""One cached request, from dispatch to delivery (design §1 steps 4-8, §4).

The chat pipeline (relay.pipeline.chat) orders the calls and its shell performs them:
``dispatch`` (plan, intent and the upstream body, in one synchronous transaction right
before sending), ``accepted`` on the first upstream event, ``complete`` with the
pipeline's capture decision before any terminal output (commits the observation), then
``delivered``; or ``abort`` when the generation ends any other way. An upstream error answer goes to
``refused`` first: when it is a refusal of the replayed state (:mod:`rejection`), the
replayed blocks are retired and the request may be resent once without replay. Each step
is synchronous: nothing can interleave between a commit and the byte it guards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from relay.clock import Clock
from relay.core.canonical import CanonicalRefused
from relay.core.capture import CaptureResult
from relay.core.history_digest import AssistantBlockKey, HistoryDigests
from relay.core.hot_blocks import HotBlocks
from relay.core.plan_memo import PlanMemo
from relay.core.planner import Plan, PlanLimits, Rejection, plan_replay
from relay.core.receipts import Reason
from relay.core.records import (
    TOUCH_GRANULARITY_S,
    MarkerKind,
    PriorPlan,
    ScopeRow,
)
from relay.core.rejection import RejectionKind, classify_rejection, redact_ciphertext
from relay.core.replace import replace_blocks
from relay.core.replay_stats import Outcome
from relay.core.resources import CapacityLedger, Lease
from relay.core.scope import Scope, merged_include
from relay.errors import StoreError, UpstreamHTTPError
from relay.observability import log
from relay.settings.crashpoints import crash_point
from relay.storage.interface import ReplayStore
from relay.storage.scoped_source import ScopedSource
from relay.translate.request_types import TranslatedRequest

if TYPE_CHECKING:
    from relay.cache.disk_safety import DiskSafety
    from relay.cache.replay_cache import CacheMetrics
    from relay.cache.shared_store import SharedSafety

T = TypeVar("T")


@dataclass(frozen=True)
class SessionContext:
    clock: Clock
    metrics: CacheMetrics
    plan_limits: PlanLimits
    max_entry_bytes: int
    new_id: Callable[[str], str]
    capacity: CapacityLedger
    hot_blocks: HotBlocks  # verified payloads shared by every plan (design §6 hot cache)
    resend_rejected: bool  # RELAY_REPLAY_REJECTION_RESEND: resend once without replay
    # Reserve, latch, admission (design §6 disk pressure); SharedSafety on PostgreSQL.
    safety: DiskSafety | SharedSafety | None = None
    # Chain verdicts of earlier plans (design §21), shared by every plan; none: each chain
    # is checked in full.
    plan_memo: PlanMemo | None = None


@dataclass(frozen=True)
class ReplayRefusal:
    """The upstream refused the replayed state of a request: its blocks are retired.

    ``resend`` is the same request without any replay, to send once (``None``: resending
    is off, and ``error`` -- the upstream's answer -- is what the client gets)."""

    kind: RejectionKind
    error: UpstreamHTTPError
    resend: dict[str, Any] | None


class CacheSession:
    def __init__(
        self,
        context: SessionContext,
        store: ReplayStore,
        lease: Lease,
        *,
        request_id: str,
        request: TranslatedRequest,
        scope: Scope,
        history: HistoryDigests,
        messages: Sequence[Any],
        spans: Sequence[tuple[int, int] | None],
    ) -> None:
        self._ctx = context
        self._store = store
        self._lease = lease
        self.request_id = request_id
        self._request = request
        self._scope = scope
        self._history = history
        self._messages = messages
        self._spans = spans
        self.plan = Plan()
        self._row: ScopeRow | None = None
        self._intent: str | None = None  # dispatched and not yet resolved

    @property
    def capture_bytes(self) -> int:
        """The bound of this generation's capture (RELAY_MAX_ENTRY_BYTES)."""
        return self._ctx.max_entry_bytes

    @property
    def position(self) -> int:
        """Where the generated assistant message will sit in the visible history."""
        return len(self._messages)

    def _safely(self, what: str, body: Callable[[], T]) -> T:
        """A safety write: retried once after releasing the disk reserve, then latched
        (:mod:`relay.cache.disk_safety`). Each retried body is one local transaction that
        comes before its send or after its answer: no model request is sent again."""
        if self._ctx.safety is None:
            return body()
        return self._ctx.safety.write(what, body, request_id=self.request_id)

    def dispatch(self) -> dict[str, Any]:
        """See :meth:`_dispatch`."""
        return self._safely("dispatch intent", self._dispatch)

    def _dispatch(self) -> dict[str, Any]:
        """Plan, pin and record the dispatch intent in one transaction; the upstream body.

        Call it right before sending, with no ``await`` in between: the plan is validated
        against the store as it is at that instant. Raises ``StoreError`` (503).
        """
        crash_point("before_dispatch_intent")
        now = self._ctx.clock.wall()
        with self._store.transaction(before_send=True):  # the one commit before forwarding
            self._row = self._store.scope_for(self._scope.digest, self._scope.targeting)
            self.plan = plan_replay(
                self._history,
                self._messages,
                ScopedSource(self._store, self._row.id),
                generation=self._row.generation,
                now=now,
                limits=self._ctx.plan_limits,
                hot=self._ctx.hot_blocks,
                memo=self._ctx.plan_memo,
            )
            # Touched even when the plan is dropped below; only the rows a touch would
            # rewrite (the plan read their stored touch in this transaction).
            due = self.plan.due_touches(now - TOUCH_GRANULARITY_S)
            if not self._ctx.capacity.try_grow(self._lease, self.plan.replay_bytes):
                rejection = Rejection(Reason.MEMORY_PRESSURE, self.position)
                self.plan = Plan((), (*self.plan.rejections, rejection), self.plan.unmatched)
            intent = self._ctx.new_id("intent_")
            # The plan's last block alone: the rest of the chain is its ancestry, which
            # cleanup keeps while that block keeps its payload (design §6 Retention).
            ids = [self.plan.blocks[-1].observation.id] if self.plan.blocks else []
            self._store.create_intent(
                intent,
                scope_id=self._row.id,
                position=self.position,
                start_digest=self._history.final_state.digest,
                now=now,
            )
            self._store.pin(intent, ids)
            if due:
                self._store.touch_payloads(due, now)
        # Only a committed intent means a generation may follow: a dispatch that failed
        # sent nothing, so closing it must not poison the position.
        self._intent = intent
        self._report_plan()
        if self.plan.blocks:
            self._count("dispatched")
        return self._upstream_body()

    def _upstream_body(self) -> dict[str, Any]:
        """The translated request with this plan's blocks in place of their messages."""
        body = dict(self._request.upstream_body)
        body["store"] = False
        body["include"] = merged_include(body.get("include"))
        if self.plan.blocks:
            blocks = {block.observation.position: block.items for block in self.plan.blocks}
            body["input"] = replace_blocks(body["input"], self._spans, blocks)
        return body

    def accepted(self) -> None:
        """The upstream answered with an event (2xx): it took the replayed state."""
        if self.plan.blocks:
            self._count("accepted")

    def refused(self, error: UpstreamHTTPError) -> ReplayRefusal | None:
        """See :meth:`_refused`."""
        return self._safely("refusal markers", lambda: self._refused(error))

    def _refused(self, error: UpstreamHTTPError) -> ReplayRefusal | None:
        """The upstream answered ``error`` before any output (the pipeline asks only
        then, and once). ``None``: an ordinary failure (the caller fails the request,
        then ``abort``). Otherwise it refused the replayed
        state: every replayed block is marked ``end_rejected`` (no plan selects it again,
        across restarts) and, since nothing was generated, the intent is moved to a plan
        without replay -- the request to resend -- or, with resending off, resolved
        without poisoning the position. Raises ``StoreError`` (503) when that cannot be
        recorded; the intent then stays for startup recovery."""
        if not self.plan.blocks:
            return None
        assert self._row is not None, "dispatch() first"
        assert self._intent is not None
        replayed = {value for block in self.plan.blocks
                    for key, value in block.payload.item_keys if key == "id"}  # fmt: skip
        kind = classify_rejection(error.status, error.envelope(), replayed)
        if kind is None:
            return None
        resend = self._ctx.resend_rejected
        now = self._ctx.clock.wall()
        intent = self._ctx.new_id("intent_") if resend else None
        with self._store.transaction():
            for block in self.plan.blocks:
                record = block.observation
                self._store.add_marker(
                    self._row.id, MarkerKind.END_REJECTED, record.end_digest, record.position, now
                )
            self._store.delete_intent(self._intent)
            if intent is not None:
                self._store.create_intent(
                    intent,
                    scope_id=self._row.id,
                    position=self.position,
                    start_digest=self._history.final_state.digest,
                    now=now,
                )
        retired = tuple(
            Rejection(Reason.UPSTREAM_REJECTED, block.observation.position, block.observation.id)
            for block in self.plan.blocks
        )
        self._ctx.metrics.replay.count_rejected(self._kind, self._model, kind)
        log.event(
            "replay_rejected",
            request_id=self.request_id,
            reason=kind.value,
            status=error.status,
            retired=len(self.plan.blocks),
            resend=resend,
        )
        self.plan = Plan((), (*self.plan.rejections, *retired), self.plan.unmatched)
        if intent is None:
            # Resolved above: nothing was generated, nothing to poison (the failure's
            # abort then only releases the lease).
            self._intent = None
            return ReplayRefusal(kind, _redacted(error), None)
        self._intent = intent  # the plan is empty now: a second refusal is an ordinary one
        self._count("resent")
        return ReplayRefusal(kind, _redacted(error), self._upstream_body())

    def complete(self, captured: CaptureResult) -> CaptureResult:
        """See :meth:`_complete`."""
        return self._safely("observation", lambda: self._complete(captured))

    def _complete(self, captured: CaptureResult) -> CaptureResult:
        """Commit what this generation was (``captured``: the capture's decision against
        what the client is sent), before the client sees its end; what was committed.

        Raises ``StoreError``: the caller must then fail the answer rather than deliver a
        generation the cache could not record.
        """
        assert self._row is not None, "dispatch() first"
        assert self._intent is not None
        result = self._admitted(captured)
        now = self._ctx.clock.wall()
        with self._store.transaction():
            outcome = self._observe(result, now)
            # Referenced in publication: the blocks this generation was made on.
            self._store.touch_payloads([b.observation.id for b in self.plan.blocks], now)
            self._store.set_intent_phase(self._intent, "delivery")
        self._ctx.metrics.observations[outcome] += 1
        log.event(
            "cache_observed",
            request_id=self.request_id,
            outcome=outcome,
            reason=result.reason.value if result.reason else None,
            position=self.position,
        )
        return result

    def _admitted(self, result: CaptureResult) -> CaptureResult:
        """Disk pressure stops admission, never observation: a payload that does not fit
        (design §6) makes the generation an observation without its payload."""
        if result.kind != "admit" or result.output_json is None or self._ctx.safety is None:
            return result
        refused = self._ctx.safety.refuse_payload(len(result.output_json.encode("utf-8")))
        if refused is None:
            return result
        log.event("cache_admission_refused", request_id=self.request_id, reason=refused.value)
        return replace(result, kind="observe", reason=Reason.DISK_PRESSURE)

    def _observe(self, result: CaptureResult, now: float) -> str:
        assert self._row is not None
        start = self._history.final_state.digest
        if result.kind == "poison" or result.envelopes is None:
            self._store.add_marker(self._row.id, MarkerKind.START_POISON, start, self.position, now)
            return "poisoned"
        # One record per spelling the client may send back (predict.py): each is the whole
        # identity of that echo, so matching, ancestry and markers treat it as any record.
        keys = []
        for envelope in result.envelopes:
            # Over the limits: no request can carry this spelling, so it needs no record.
            with suppress(CanonicalRefused):
                keys.append(self._history.final_state.extend(envelope)[0])
        if not keys:
            return "beyond_limits"
        assert result.payload_fingerprint is not None
        plan = self.plan.stored
        conflicted = {
            key.end_digest
            for key in keys
            if self._store.conflicts_at(
                self._row.id, key.end_digest, result.payload_fingerprint, plan
            )
        }
        if conflicted:
            # A client holding either generation may echo any spelling of its arguments:
            # every spelling of every generation involved is ambiguous.
            ends = {key.end_digest for key in keys} | self._spelling_siblings(start, conflicted)
            for end in sorted(ends):
                self._store.add_marker(
                    self._row.id, MarkerKind.END_CONFLICT, end, self.position, now
                )
        outcomes = [self._record(key, result, plan, now, admit=not conflicted) for key in keys]
        return "conflict" if conflicted else outcomes[0]

    def _spelling_siblings(self, start: str, ends: set[str]) -> set[str]:
        """The end digests of every record of the generations recorded at ``ends``: their
        other spellings (one generation's records share its start, intent and payload)."""
        assert self._row is not None
        return self._store.generation_ends(self._row.id, start, ends)

    def _record(
        self, key: AssistantBlockKey, result: CaptureResult, plan: PriorPlan, now: float, *,
        admit: bool,
    ) -> str:  # fmt: skip
        """Record one spelling's observation (or renew its repeat)."""
        assert self._row is not None
        assert result.payload_fingerprint is not None
        assert result.output_hash is not None
        same = self._store.repeats(
            self._row.id, generation=self._row.generation, position=key.position,
            start_digest=key.start_digest, end_digest=key.end_digest,
            envelope_fingerprint=key.envelope_fingerprint,
            payload_fingerprint=result.payload_fingerprint, prior_plan=plan,
        )  # fmt: skip
        if same:
            self._store.touch_payloads(same, now)
            return "repeat"
        admit = admit and result.kind == "admit"
        observation = self._store.add_observation(
            scope_id=self._row.id,
            generation=self._row.generation,
            position=key.position,
            start_digest=key.start_digest,
            end_digest=key.end_digest,
            envelope_fingerprint=key.envelope_fingerprint,
            payload_fingerprint=result.payload_fingerprint,
            output_hash=result.output_hash,
            prior_plan=plan,
            intent_id=self._intent,
            snapshot=result.snapshot,
            replayable=admit,
            now=now,
        )
        if admit:
            assert result.output_json is not None
            # Its ancestry is the plan's link (prior_plan.parent_id): no row per ancestor.
            self._store.put_payload(observation.id, result.output_json, now)
            return "admitted"
        return "observed"

    def delivered(self) -> None:
        """The client has the whole answer: resolve the intent."""
        self._close(poison=False, reason="delivered")

    def abort(self, reason: str, *, poison: bool = True) -> None:
        """The generation ended undelivered (failure, disconnect, timeout). ``poison``:
        its output is unknown (no committed observation), so its position is poisoned;
        after ``complete`` (``poison=False``) only the intent is resolved. Best effort."""
        self._close(poison=poison, reason=reason)

    def _close(self, *, poison: bool, reason: str) -> None:
        self._ctx.capacity.release(self._lease)  # once: a released lease stays released
        if self._row is None or self._intent is None:
            return  # never dispatched (nothing was generated), or resolved already
        now = self._ctx.clock.wall()
        intent = self._intent
        try:
            self._safely("close intent", lambda: self._resolve(poison=poison, now=now))
        except StoreError as err:
            # The intent row stays: startup recovery poisons it (issue 5 lifecycle); a
            # shared store's, once the database answers again (design §22).
            log.event("cache_close_failed", request_id=self.request_id, code=err.code)
            if self._ctx.safety is not None:
                self._ctx.safety.unresolved(intent)
            return
        finally:
            self._intent = None  # one close per intent: what failed is recovery's
        if poison:
            log.event("cache_poisoned", request_id=self.request_id, reason=reason)

    def _resolve(self, *, poison: bool, now: float) -> None:
        assert self._row is not None
        assert self._intent is not None
        with self._store.transaction():
            if poison:
                self._store.add_marker(
                    self._row.id,
                    MarkerKind.START_POISON,
                    self._history.final_state.digest,
                    self.position,
                    now,
                )
            self._store.delete_intent(self._intent)

    @property
    def _kind(self) -> str:
        return self._request.shape

    @property
    def _model(self) -> str:
        return str(self._request.upstream_body.get("model"))

    def _count(self, outcome: Outcome) -> None:
        self._ctx.metrics.replay.count(self._kind, self._model, outcome)

    def _report_plan(self) -> None:
        metrics = self._ctx.metrics
        metrics.replayed_blocks += len(self.plan.blocks)
        for rejection in self.plan.rejections:
            metrics.rejections[rejection.reason.value] += 1
        log.event(
            "cache_plan",
            request_id=self.request_id,
            scope=self._scope.digest[:12],
            replayed=len(self.plan.blocks),
            replay_bytes=self.plan.replay_bytes,
            rejected=sorted({r.reason.value for r in self.plan.rejections}),
            unmatched=self.plan.unmatched,
        )


def _redacted(error: UpstreamHTTPError) -> UpstreamHTTPError:
    """The upstream's error answer with any ciphertext prefix it quotes taken out."""
    envelope = error.envelope()
    inner = envelope.get("error")
    if not isinstance(inner, dict) or not isinstance(inner.get("message"), str):
        return error
    return UpstreamHTTPError(
        error.status,
        {**envelope, "error": {**inner, "message": redact_ciphertext(inner["message"])}},
    )
