"""The replay cache as the request handler sees it: one object per process.

``ReplayCache.open`` owns the store (or nothing, when caching is off). ``begin`` decides
whether a translated request is eligible and computes its identity (pure, CPU only);
everything stateful for that request lives in the returned :class:`CacheSession`.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

import orjson

from relay.cache.disk_safety import DiskSafety, open_store, store_exists
from relay.cache.session import CacheSession, SessionContext
from relay.cache.shared_store import SharedSafety, is_shared, open_shared
from relay.clock import Clock
from relay.core.canonical import CanonicalRefused
from relay.core.history_digest import HistoryDigests, history_digests
from relay.core.hot_blocks import HotBlocks
from relay.core.plan_memo import PlanMemo
from relay.core.planner import PlanLimits
from relay.core.receipts import Reason
from relay.core.records import MarkerKind
from relay.core.rendered_messages import RenderedMessages
from relay.core.replay_header import PASSTHROUGH
from relay.core.replay_stats import ReplayStats
from relay.core.resources import CapacityLedger
from relay.core.responses_history import REASON_TEXT, Underivable, derive_responses_history
from relay.core.scope import Scope, build_scope, scope_config, scope_targeting
from relay.observability import log
from relay.settings.config import Config
from relay.settings.crashpoints import crash_point
from relay.storage.disk_guard import DiskGuard
from relay.storage.interface import ReplayStore
from relay.storage.recovery import fence, open_disabled, open_enabled, record_gap
from relay.translate.request_types import TranslatedRequest
from relay.translate.sampling import is_reasoning_model

T = TypeVar("T")

# Why a generation was fenced: a Responses-shaped history's underivable reason code
# (relay.core.responses_history), or direct Responses traffic. Bounded: metric labels.
DIRECT_RESPONSES = "direct_responses"
FENCE_REASON_TEXT: dict[str, str] = {
    **REASON_TEXT,
    DIRECT_RESPONSES: "direct /v1/responses traffic",
}


# The built-in upstream's origin in every scope while the relay serves from its embedded
# offline fake: the fake's port changes on every start, and this label, unlike its URL, does
# not. It has no "://", so no real upstream's origin (scheme://host:port) can equal it.
EMBEDDED_FAKE_ORIGIN = "relay-embedded-offline-fake"

# Scopes remembered by ReplayCache._scope: a handful of concurrent sessions' tools and
# settings (each holds its first request's configuration, read-only).
SCOPE_MEMO_ENTRIES = 16


@dataclass(frozen=True)
class Began:
    """The cache's decision for one request, before anything is forwarded: a
    ``session`` when its generation is observed; ``skipped``, the reason code when it is
    not; ``guard``, the write that must be durable before it is forwarded (``"fence"``:
    the scopes it may extend, or with the cache off the coverage gap; ``"poison"``: its
    position, going unobserved), performed by :meth:`write_guard`."""

    session: CacheSession | None
    skipped: str | None = None
    guard: Literal["fence", "poison"] | None = None
    _write: Callable[[], None] | None = None

    def write_guard(self) -> None:
        """Write the guard (none: nothing). Raises ``StoreError``: never forward then."""
        if self._write is not None:
            self._write()


@dataclass(frozen=True)
class UpstreamIdentity:
    """The upstream a generation goes to, as scopes see it (origin, endpoint, credential)."""

    origin: str
    endpoint: str
    credential: str = field(repr=False)

    @classmethod
    def of(cls, url: str, credential: str) -> UpstreamIdentity:
        parts = urlsplit(url)
        return cls(f"{parts.scheme}://{parts.netloc}", parts.path, credential)


@dataclass
class CacheMetrics:
    """Process-local counters (diagnostics, not the safety ledger)."""

    requests: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    replayed_blocks: int = 0  # dispatched replacements, not upstream acceptance
    rejections: Counter[str] = field(default_factory=Counter)
    observations: Counter[str] = field(default_factory=Counter)
    fenced: int = 0
    fences: Counter[str] = field(default_factory=Counter)  # by FENCE_REASON_TEXT code
    replay: ReplayStats = field(default_factory=ReplayStats)


class ReplayCache:
    """The cache for one relay process.

    Three states: off with no store (nothing on disk is touched), off over an existing
    store (owned and recovered; the coverage gap recorded before the first request the
    cache would have observed is forwarded, no other per-request work), and on.
    """

    def __init__(
        self,
        config: Config,
        clock: Clock,
        store: ReplayStore | None,
        *,
        upstream_url: str,
        upstream_credential: str,
        relay_token: str,
        new_id: Callable[[str], str],
        safety: DiskSafety | SharedSafety | None = None,
        upstream_origin: str | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.store = store
        self.safety = safety  # the reserve, the .guard latch and admission (design §6)
        self.serving = store is not None and config.reasoning_cache_enabled
        self.metrics = CacheMetrics()
        self.capacity = CapacityLedger(config.cache_budget)
        self.hot_blocks = HotBlocks(config.cache_budget.hot_cache_bytes)
        self.plan_memo = PlanMemo()
        self._upstream = UpstreamIdentity.of(upstream_url, upstream_credential)
        if upstream_origin is not None:  # EMBEDDED_FAKE_ORIGIN: stable across starts
            self._upstream = replace(self._upstream, origin=upstream_origin)
        self._context = SessionContext(
            clock=clock,
            metrics=self.metrics,
            plan_limits=PlanLimits(
                max_plan_records=config.reasoning_cache_max_plan_records,
                max_replay_bytes=config.reasoning_cache_max_replay_bytes,
                retention_s=config.reasoning_cache_retention_days * 24 * 3600.0,
            ),
            max_entry_bytes=config.reasoning_cache_max_entry_bytes,
            new_id=new_id,
            capacity=self.capacity,
            hot_blocks=self.hot_blocks,
            plan_memo=self.plan_memo,
            resend_rejected=config.replay_rejection_resend,
            safety=safety,
        )
        self._relay_token = relay_token
        self._scopes: OrderedDict[tuple[object, ...], Scope] = OrderedDict()  # see _scope
        # The last requests' message renderings: a session resends its history every turn.
        self.rendered = RenderedMessages()
        self.gap_recorded = False  # off over a store: this process made the gap durable

    @classmethod
    def open(
        cls,
        config: Config,
        clock: Clock,
        *,
        upstream_url: str,
        upstream_credential: str,
        relay_token: str,
        new_id: Callable[[str], str],
        upstream_origin: str | None = None,
    ) -> ReplayCache:
        """Open (and recover) the store when caching is on, or when it is off but a store
        exists (to record the coverage gap). Off with no store: touch nothing on disk.
        ``upstream_origin``: the built-in upstream's origin in scopes, instead of its URL's
        (:data:`EMBEDDED_FAKE_ORIGIN`)."""
        store: ReplayStore | None = None
        safety: DiskSafety | SharedSafety | None = None
        path = config.cache_path
        if config.reasoning_cache_url is not None:
            # The shared store: opened whether caching is on or off here, since other
            # relays use it now (off, this one records coverage gaps before forwarding).
            shared, safety, recovered = open_shared(
                config.reasoning_cache_url, clock,
                lease_ms=config.reasoning_cache_lease_ms,
                disk_bytes=config.reasoning_cache_disk_bytes,
            )  # fmt: skip
            log.event("cache_opened_shared", database=str(config.reasoning_cache_url),
                      instance=shared.instance_id, recovered_intents=recovered)  # fmt: skip
            store = shared
        elif config.reasoning_cache_enabled or store_exists(path):
            guard = DiskGuard(path, config.reasoning_cache_reserve_bytes)
            sqlite = store = open_store(guard, clock)  # refuses a latched or blocked store
            safety = disk = DiskSafety(
                sqlite, guard, disk_bytes=config.reasoning_cache_disk_bytes, clock=clock
            )
            try:
                if config.reasoning_cache_enabled:
                    report = disk.write(
                        "startup recovery", lambda: open_enabled(sqlite, clock.wall()), latch=False
                    )
                    if not guard.ensure_reserve():
                        log.event("cache_reserve_unavailable", bytes=guard.reserve_bytes,
                                  free=guard.free_bytes())  # fmt: skip
                    log.event(
                        "cache_opened",
                        recovered_intents=report.recovered_intents,
                        gap_consumed=report.gap_consumed,
                        generations_advanced=report.generations_advanced,
                    )
                else:
                    recovered = disk.write(
                        "startup recovery", lambda: open_disabled(sqlite, clock.wall()),
                        latch=False,
                    )  # fmt: skip
                    log.event("cache_opened_disabled", recovered_intents=recovered)
            except BaseException:
                sqlite.close()
                raise
        return cls(
            config,
            clock,
            store,
            upstream_url=upstream_url,
            upstream_credential=upstream_credential,
            relay_token=relay_token,
            new_id=new_id,
            safety=safety,
            upstream_origin=upstream_origin,
        )

    @property
    def enabled(self) -> bool:
        return self.serving

    def close(self) -> None:
        if self.store is not None:
            if self.safety is not None and not self.safety.latched:
                self.safety.checkpoint()  # leave an empty WAL: the next start needs no room
            self.store.close()

    def fence(
        self,
        model: str,
        caller: str | None,
        request_id: str,
        *,
        reason: str = DIRECT_RESPONSES,
        where: str | None = None,
        upstream: UpstreamIdentity | None = None,
    ) -> None:
        """Before forwarding a generation the cache cannot observe (direct Responses
        traffic, an underivable history): fence the scopes it may extend. ``reason``: a
        :data:`FENCE_REASON_TEXT` code (counted and logged, so an owner can see why replay
        stopped); ``where``: the input position at fault, if any. ``upstream``: another
        Responses provider (default: the built-in one). Raises ``StoreError`` (503): never
        forward unfenced."""
        if not self.serving:
            self._before_unobserved(request_id)  # off: the coverage gap covers it
            return
        assert self.store is not None
        credential = (upstream or self._upstream).credential
        targeting = scope_targeting(
            self.store.secret, credential=credential, model=model, caller=caller
        )
        store = self.store
        fenced = self._safely(
            "fence", lambda: fence(store, targeting, self.clock.wall()), request_id
        )
        self.metrics.fenced += 1
        self.metrics.fences[reason] += 1
        # An underivable history is worth a warning: it stops replay for the credential.
        level = logging.INFO if reason == DIRECT_RESPONSES else logging.WARNING
        at = {} if where is None else {"where": where}
        log.event("cache_fenced", level, request_id=request_id, scopes=fenced, reason=reason,
                  why=FENCE_REASON_TEXT.get(reason, reason), **at)  # fmt: skip

    def decide_passthrough(
        self,
        model: str,
        caller: str | None,
        request_id: str,
        *,
        upstream: UpstreamIdentity | None = None,
    ) -> Began:
        """The decision for a direct ``POST /v1/responses`` call, which the cache never
        observes (skip code ``responses_passthrough``, the replay header's reason): its
        guard is the fence of the scopes it may extend (design §7) -- with the cache off
        over a store, the coverage gap until it is recorded; off with no store, nothing.
        Nothing is written here."""
        if not self.serving and (self.store is None or self.gap_recorded):
            return Began(None, PASSTHROUGH)

        def fence_scopes() -> None:
            self.fence(model, caller, request_id, reason=DIRECT_RESPONSES, upstream=upstream)

        return Began(None, PASSTHROUGH, "fence", fence_scopes)

    def begin(
        self,
        request: TranslatedRequest,
        body: Mapping[str, Any],
        request_id: str,
        *,
        upstream: UpstreamIdentity | None = None,
        on_skip: Callable[[str], None] | None = None,
    ) -> CacheSession | None:
        """:meth:`decide`, then its guard written at once: a session for an eligible
        request, or ``None`` (``on_skip`` hears the reason code). Raises ``StoreError``
        (503) when a required safety marker cannot be written."""
        began = self.decide(request, body, request_id, upstream=upstream)
        began.write_guard()
        if began.skipped is not None and on_skip is not None:
            on_skip(began.skipped)
        return began.session

    def decide(
        self,
        request: TranslatedRequest,
        body: Mapping[str, Any],
        request_id: str,
        *,
        upstream: UpstreamIdentity | None = None,
    ) -> Began:
        """Whether this request is cached (a session), and which write must be durable
        before it is forwarded (``Began.guard``, written by ``write_guard``); nothing is
        written here. ``upstream``: another Responses provider (default: the built-in
        one); its scopes are its own. Raises ``StoreError`` (503) when the disk safety
        latch is set."""
        upstream = upstream or self._upstream
        model = request.upstream_body.get("model")
        reasoning = isinstance(model, str) and is_reasoning_model(model)
        if not self.serving:
            if reasoning and self.store is not None and not self.gap_recorded:
                # On, it would have been observed (or fenced): a gap now.
                return Began(None, None, "fence", lambda: self._before_unobserved(request_id))
            return Began(None)
        assert self.store is not None
        self.metrics.requests += 1
        if not isinstance(model, str) or not reasoning:
            self._skip(request_id, "not_a_reasoning_model")
            return Began(None, "not_a_reasoning_model")
        visible = _visible_history(request, body)
        if isinstance(visible, Underivable):
            self._skip(request_id, Reason.UNDERIVABLE_HISTORY.value)
            fenced_model, caller, code, where = model, request.caller, visible.code, visible.where

            def fence_scopes() -> None:
                self.fence(
                    fenced_model, caller, request_id,
                    reason=code, where=where, upstream=upstream,
                )  # fmt: skip

            return Began(None, Reason.UNDERIVABLE_HISTORY.value, "fence", fence_scopes)
        messages, spans = visible
        summaries = self.config.reasoning_summaries_as_content
        try:
            scope = self._scope(request, upstream)
            # Summaries sent as reasoning_content may or may not come back from the
            # client: leave that field out of the identity when they are on.
            history = history_digests(
                scope, messages, exclude_reasoning_content=summaries, memo=self.rendered
            )
        except CanonicalRefused:
            # Deterministic: the same scoped history always gets this answer, and no
            # longer history can fit either. No intent, no marker.
            self._skip(request_id, Reason.CANONICAL_LIMIT.value)
            return Began(None, Reason.CANONICAL_LIMIT.value)
        if self.safety is not None:
            self.safety.check()  # latched: a cached request would need a safety record
        lease = self.capacity.try_acquire(history.bytes_used)
        if lease is None:
            return Began(
                None,
                Reason.CAPACITY_BYPASS.value,
                "poison",
                lambda: self._bypass(scope, history, request_id),
            )
        session = CacheSession(
            self._context,
            self.store,
            lease,
            request_id=request_id,
            request=request,
            scope=scope,
            history=history,
            messages=messages,
            spans=spans,
        )
        return Began(session)

    def _scope(self, request: TranslatedRequest, upstream: UpstreamIdentity) -> Scope:
        """``build_scope``, remembered for the last :data:`SCOPE_MEMO_ENTRIES` scopes: a
        session's requests repeat the same tools and settings, whose canonical rendering
        is most of the scope's cost (design §21). The key is every input that varies
        (the secret and relay token are the process's own): the configuration as orjson
        spells it with sorted keys, one spelling per JSON value (the client's parse
        refuses NaN and the infinities, the one values it would spell alike). A
        configuration orjson cannot spell is built each time. Raises
        ``CanonicalRefused`` (never remembered)."""
        assert self.store is not None
        try:
            config: bytes | None = orjson.dumps(
                scope_config(request.upstream_body), option=orjson.OPT_SORT_KEYS
            )
        except TypeError:  # orjson.JSONEncodeError: e.g. an integer beyond 64 bits
            config = None
        key = (upstream.origin, upstream.endpoint, upstream.credential, request.caller,
               request.shape, request.upstream_body.get("model"), config)  # fmt: skip
        if config is not None and (known := self._scopes.get(key)) is not None:
            self._scopes.move_to_end(key)
            return known
        scope = build_scope(
            secret=self.store.secret,
            upstream_origin=upstream.origin,
            endpoint=upstream.endpoint,
            credential=upstream.credential,
            relay_token=self._relay_token,
            caller=request.caller,
            upstream_body=request.upstream_body,
            openai_beta=None,  # the relay sends no openai-beta header upstream
            body_shape=request.shape,
        )
        if config is not None:
            self._scopes[key] = scope
            if len(self._scopes) > SCOPE_MEMO_ENTRIES:
                self._scopes.popitem(last=False)
        return scope

    def _before_unobserved(self, request_id: str) -> None:
        """Off over an existing store, before forwarding a request the cache would have
        observed or fenced (design §7): record the coverage gap durably, once per process.
        Raises ``StoreError`` (503) when it cannot be written: never forward unrecorded."""
        if self.store is None or self.gap_recorded:
            return  # no store: nothing to protect
        store = self.store
        self._safely("coverage gap", lambda: record_gap(store), request_id)
        # A shared store's gap is consumed as it is recorded (other relays serve on): the
        # next unobserved request needs one of its own.
        self.gap_recorded = not is_shared(store)
        crash_point("after_coverage_gap")
        log.event("cache_gap_recorded", request_id=request_id)

    def _bypass(self, scope: Scope, history: HistoryDigests, request_id: str) -> None:
        """No session to spare: this generation goes unobserved, so its position is
        poisoned first (it must not leave an older record there falsely unique)."""
        assert self.store is not None
        store = self.store

        def poison() -> None:
            with store.transaction(before_send=True):
                row = store.scope_for(scope.digest, scope.targeting)
                store.add_marker(
                    row.id,
                    MarkerKind.START_POISON,
                    history.final_state.digest,
                    history.final_state.position,
                    self.clock.wall(),
                )

        self._safely("bypass poison", poison, request_id)
        self._skip(request_id, Reason.CAPACITY_BYPASS.value)

    def _safely(self, what: str, body: Callable[[], T], request_id: str) -> T:
        if self.safety is None:
            return body()
        return self.safety.write(what, body, request_id=request_id)

    def _skip(
        self, request_id: str, reason: str, on_skip: Callable[[str], None] | None = None
    ) -> None:
        if on_skip is not None:
            on_skip(reason)
        self.metrics.skipped[reason] += 1
        log.event("cache_skipped", request_id=request_id, reason=reason)


def _visible_history(
    request: TranslatedRequest, body: Mapping[str, Any]
) -> tuple[Sequence[Any], Sequence[tuple[int, int] | None]] | Underivable:
    if request.shape == "chat":
        assert request.message_spans is not None
        return body["messages"], request.message_spans
    return derive_responses_history(body.get("input"), body.get("instructions"), body.get("tools"))
