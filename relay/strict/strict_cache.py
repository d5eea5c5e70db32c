"""The strict-provider reasoning cache as the Chat-provider handler sees it: one per process.

Per request: :meth:`StrictCache.prepare` (strip, or restore and start a capture) before
dispatch, then :meth:`StrictCache.commit` once the answer is complete and before the
client gets its terminal frame. Preparing only reads the store; every write of a request
(the restored records' slide, the answer's records) is in :meth:`~StrictCache.commit`, so
a request refused or failed before its answer completes writes nothing. It shares the
replay cache's identity (scope and history digests, reasoning_content excluded), its
store (``store.strict``) and its switch: with ``REASONING_CACHE_ENABLED`` off nothing is
restored or captured (stripping for non-strict upstreams still happens: it is not
caching).

Lookups go memory (a bounded LRU) → disk; a disk hit is verified (text digest, expiry)
and promoted. Entries slide: each one restored pushes its expiry to ``now + ttl`` in
memory and on disk once the answer that used it completes. Expired rows are removed by
:meth:`cleanup`, run on the IOLoop every ``cleanup_every_s`` by :meth:`start_cleanup`.
Store failures never fail a request here: the worst outcome of a lost record is a miss
(the provider's own 400), so they are logged, counted, and the memory layer carries on.
Time is the injected clock's wall time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tornado.ioloop import PeriodicCallback

from relay.clock import Clock
from relay.core.canonical import CanonicalRefused
from relay.core.history_digest import HistoryState, history_digests
from relay.core.receipts import Reason
from relay.core.rendered_messages import RenderedMessages
from relay.core.scope import Scope, build_scope
from relay.errors import StoreError
from relay.observability import log
from relay.settings.providers import Provider
from relay.storage.interface import ReplayStore
from relay.storage.strict_store import StrictEntry, StrictPage, StrictStats
from relay.strict.chat_capture import ChatCapture, capture_key
from relay.strict.memory import DEFAULT_MAX_BYTES, CachedReasoning, ReasoningLru
from relay.strict.restore import Restored, restore, strip
from relay.strict.rules import StrictRule

BODY_SHAPE = "strict-chat"
DEFAULT_CLEANUP_S = 300.0

ModelKey = tuple[str, str]  # (provider, upstream model)


@dataclass
class StrictMetrics:
    """Process-local counters by (provider, model); ``clear`` resets them."""

    hits: Counter[ModelKey] = field(default_factory=Counter)  # messages restored
    misses: Counter[ModelKey] = field(default_factory=Counter)  # needed, none stored
    replays: Counter[ModelKey] = field(default_factory=Counter)  # requests with a restore
    filled_empty: Counter[ModelKey] = field(default_factory=Counter)  # misses sent as ""
    stripped: Counter[ModelKey] = field(default_factory=Counter)  # messages stripped
    captured: Counter[ModelKey] = field(default_factory=Counter)  # records written
    # hits by layer and key: "memory/identity", "disk/tool_call", ...
    sources: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)  # capture reason codes
    rejected: Counter[str] = field(default_factory=Counter)  # stored records refused
    store_failures: int = 0


@dataclass(frozen=True)
class StrictTarget:
    """Where a Chat request goes: the provider, its model, the rule in force, the caller."""

    provider: Provider
    model: str
    rule: StrictRule | None
    caller: str | None

    @property
    def key(self) -> ModelKey:
        return (self.provider.name, self.model)


@dataclass
class PreparedRequest:
    """The messages to send, and what is needed to record the answer."""

    target: StrictTarget
    messages: list[Any]
    restored: Restored | None = None
    stripped: int = 0
    capture: ChatCapture | None = None  # None: nothing is recorded for this request
    scope_digest: str | None = None
    history: HistoryState | None = None  # None: the history had no identity
    used: tuple[CachedReasoning, ...] = ()  # restored records: they slide at commit


@dataclass(frozen=True)
class StrictCacheStats:
    memory_entries: int
    memory_bytes: int
    store: StrictStats | None  # None when caching is off
    metrics: StrictMetrics


class StrictCache:
    def __init__(
        self,
        *,
        clock: Clock,
        store: ReplayStore | None,
        relay_token: str,
        ttl_s: float,
        memory_entries: int,
        max_entry_bytes: int,
        memory_bytes: int = DEFAULT_MAX_BYTES,
        cleanup_every_s: float = DEFAULT_CLEANUP_S,
    ) -> None:
        """``store`` is the replay cache's store when caching is on, else ``None``."""
        self.clock = clock
        self.store = store
        self.ttl_s = ttl_s
        self.max_entry_bytes = max_entry_bytes
        self.memory = ReasoningLru(memory_entries, memory_bytes)
        self.metrics = StrictMetrics()
        # A session resends its history every turn: its messages' renderings, as the
        # replay cache keeps them (design §21); bounded, and used only when restoring.
        self.rendered = RenderedMessages()
        self._relay_token = relay_token
        self._cleanup_every_s = cleanup_every_s
        self._cleanup: PeriodicCallback | None = None

    @property
    def enabled(self) -> bool:
        return self.store is not None

    # --- one request ---------------------------------------------------------------------

    def prepare(
        self,
        target: StrictTarget,
        messages: Sequence[Any],
        *,
        tools_present: bool,
        request_id: str,
    ) -> PreparedRequest:
        rule = target.rule
        if rule is None or not rule.restores:
            out, stripped = strip(messages)
            if stripped:
                self.metrics.stripped[target.key] += stripped
            return PreparedRequest(target, out, stripped=stripped)
        if self.store is None:
            return PreparedRequest(target, list(messages))
        try:
            scope = self._scope(target)
        except CanonicalRefused:
            self._skip(request_id, Reason.CANONICAL_LIMIT)
            return PreparedRequest(target, list(messages))
        ends: Sequence[str | None]
        try:
            digests = history_digests(
                scope, messages, exclude_reasoning_content=True, memo=self.rendered
            )
            ends, history = digests.boundaries[1:], digests.final_state
        except CanonicalRefused:
            # Tool-call ids still find records; only the identity is unknown.
            ends, history = [None] * len(messages), None
        now = self.clock.wall()
        used: list[CachedReasoning] = []

        def lookup(end_digest: str | None, call_ids: tuple[str, ...]) -> str | None:
            found = self._find(scope.digest, end_digest, call_ids, now, request_id)
            if found is None:
                return None
            used.append(found)
            return found.reasoning

        restored = restore(messages, rule, ends, lookup, tools_present=tools_present)
        self._count(target, restored)
        return PreparedRequest(
            target,
            restored.messages,
            restored=restored,
            capture=ChatCapture(max_bytes=self.max_entry_bytes),
            scope_digest=scope.digest,
            history=history,
            used=tuple(used),
        )

    def commit(self, prepared: PreparedRequest, request_id: str) -> int:
        """Slide the records the request restored, then record the completed answer's
        reasoning (call before the terminal frame); how many records were written."""
        self._touch(prepared.used, self.clock.wall())
        capture, scope_digest = prepared.capture, prepared.scope_digest
        if capture is None or scope_digest is None:
            return 0
        if capture.exhausted:
            self._skip(request_id, Reason.CAPTURE_EXHAUSTED)
            return 0
        target = prepared.target
        written = 0
        for turn in capture.turns():
            if not turn.reasoning:
                self._skip(request_id, Reason.NO_REASONING)
                continue
            key = capture_key(prepared.history, turn)
            if key.end_digest is None and not key.tool_call_ids:
                self._skip(request_id, key.reason or Reason.UNKNOWN_PREDICTION)
                continue
            if key.reason is not None:  # recorded, but found by tool-call id only
                log.event("strict_identity_unknown", request_id=request_id, reason=key.reason)
            try:
                turn.reasoning.encode("utf-8")
            except UnicodeEncodeError:
                self._skip(request_id, Reason.UNSUPPORTED_OUTPUT)
                continue
            now = self.clock.wall()
            entry = CachedReasoning(
                None, scope_digest, key.end_digest, key.tool_call_ids, target.provider.name,
                target.model, turn.reasoning, now + self.ttl_s,
            )  # fmt: skip
            self._persist(entry, now)
            self.memory.put(entry)
            written += 1
        if written:
            self.metrics.captured[target.key] += written
        return written

    # --- expiry --------------------------------------------------------------------------

    def cleanup(self) -> int:
        """Drop expired entries from memory and disk; how many rows were deleted."""
        now = self.clock.wall()
        self.memory.remove_where(lambda entry: now >= entry.expires_at)
        if self.store is None:
            return 0
        try:
            deleted = self.store.strict.delete_expired(now)
        except StoreError as err:
            self._failed("cleanup", err)
            return 0
        if deleted:
            log.event("strict_cleanup", deleted=deleted)
            try:
                self.store.checkpoint()  # design §6: the WAL is emptied after a cleanup
            except StoreError as err:
                self._failed("checkpoint", err)
        return deleted

    def start_cleanup(self) -> None:
        """Run :meth:`cleanup` periodically on the current IOLoop (when caching is on)."""
        if self.store is not None and self._cleanup is None:
            self._cleanup = PeriodicCallback(self._periodic_cleanup, self._cleanup_every_s * 1000)
            self._cleanup.start()

    def _periodic_cleanup(self) -> None:
        self.cleanup()

    def stop_cleanup(self) -> None:
        if self._cleanup is not None:
            self._cleanup.stop()
            self._cleanup = None

    # --- administration (the cache API) -----------------------------------------------------
    # Call on the IOLoop thread (the store's connection lives there). Unlike the request
    # path, these raise StoreError (a 503) when the database fails: an operator asked.

    def stats(self) -> StrictCacheStats:
        store = None if self.store is None else self.store.strict.stats(self.clock.wall())
        return StrictCacheStats(len(self.memory), self.memory.bytes, store, self.metrics)

    def entries(
        self,
        *,
        provider: str | None = None,
        model: str | None = None,
        limit: int = 50,
        before_id: int | None = None,
    ) -> StrictPage:
        if self.store is None:
            return StrictPage((), None)
        return self.store.strict.page(
            provider=provider, model=model, limit=limit, before_id=before_id
        )

    def clear(self) -> int:
        """Forget everything (memory and disk) and reset the counters; rows deleted."""
        deleted = 0 if self.store is None else self.store.strict.delete_all()
        self.memory.remove_where(lambda entry: True)
        self.metrics = StrictMetrics()
        return deleted

    def clear_provider(self, provider: str) -> int:
        deleted = 0 if self.store is None else self.store.strict.delete_provider(provider)
        self.memory.remove_where(lambda entry: entry.provider == provider)
        return deleted

    def delete_tool_call(self, call_id: str) -> int:
        deleted = 0 if self.store is None else self.store.strict.delete_tool_call(call_id)
        self.memory.remove_where(lambda entry: call_id in entry.tool_call_ids)
        return deleted

    # --- internals -----------------------------------------------------------------------

    def _scope(self, target: StrictTarget) -> Scope:
        url = urlsplit(target.provider.url)
        return build_scope(
            secret=self._store().secret,
            upstream_origin=f"{url.scheme}://{url.netloc}",
            endpoint=url.path,
            credential=target.provider.api_key,
            relay_token=self._relay_token,
            caller=target.caller,
            # Only the model: tools, sampling and other per-turn settings must not split
            # a conversation's history (the reasoning belongs to the message either way).
            upstream_body={"model": target.model},
            openai_beta=None,
            body_shape=BODY_SHAPE,
        )

    def _find(
        self,
        scope_digest: str,
        end_digest: str | None,
        call_ids: tuple[str, ...],
        now: float,
        request_id: str,
    ) -> CachedReasoning | None:
        """Identity first, then each tool-call id; memory before disk for each key."""
        keys = [("identity", end_digest)] if end_digest is not None else []
        keys += [("tool_call", call_id) for call_id in call_ids]
        for kind, key in keys:
            held = (
                self.memory.by_end(scope_digest, key)
                if kind == "identity"
                else self.memory.by_tool_call(scope_digest, key)
            )
            if held is not None and now < held.expires_at:
                self.metrics.sources[f"memory/{kind}"] += 1
                return held
            if held is not None:
                self.memory.discard(held)
            row = self._load(scope_digest, kind, key)
            if row is None:
                continue
            reason = self._refusal(row, now)
            if reason is not None:
                self.metrics.rejected[reason] += 1
                log.event("strict_record_refused", request_id=request_id, entry=row.id,
                          reason=reason)  # fmt: skip
                continue
            cached = CachedReasoning(
                row.id, row.scope_digest, row.end_digest, row.tool_call_ids, row.provider,
                row.model, row.reasoning, row.expires_at,
            )  # fmt: skip
            self.memory.put(cached)
            self.metrics.sources[f"disk/{kind}"] += 1
            return cached
        return None

    def _load(self, scope_digest: str, kind: str, key: str) -> StrictEntry | None:
        strict = self._store().strict
        try:
            if kind == "identity":
                return strict.by_end(scope_digest, key)
            return strict.by_tool_call(scope_digest, key)
        except StoreError as err:
            self._failed("lookup", err)
            return None

    def _persist(self, entry: CachedReasoning, now: float) -> None:
        """Write a new record; on failure it lives in memory only (``entry_id`` None)."""
        try:
            row = self._store().strict.put(
                scope_digest=entry.scope_digest,
                end_digest=entry.end_digest,
                tool_call_ids=entry.tool_call_ids,
                provider=entry.provider,
                model=entry.model,
                reasoning=entry.reasoning,
                now=now,
                expires_at=entry.expires_at,
            )
        except StoreError as err:
            self._failed("store", err)
            return
        entry.entry_id = row.id

    def _count(self, target: StrictTarget, restored: Restored) -> None:
        metrics, key = self.metrics, target.key
        for counter, value in ((metrics.hits, restored.hits), (metrics.misses, restored.misses),
                               (metrics.filled_empty, restored.filled_empty),
                               (metrics.replays, int(restored.hits > 0))):  # fmt: skip
            if value:
                counter[key] += value

    @staticmethod
    def _refusal(row: StrictEntry, now: float) -> Reason | None:
        if not row.intact:
            return Reason.PAYLOAD_DIGEST_MISMATCH
        if row.expired(now):
            return Reason.RECORD_EXPIRED
        return None

    def _touch(self, used: Sequence[CachedReasoning], now: float) -> None:
        if not used:
            return
        expires_at = now + self.ttl_s
        for entry in used:
            entry.expires_at = max(entry.expires_at, expires_at)
        ids = [entry.entry_id for entry in used if entry.entry_id is not None]
        try:
            self._store().strict.touch(ids, now=now, expires_at=expires_at)
        except StoreError as err:
            self._failed("touch", err)

    def _store(self) -> ReplayStore:
        assert self.store is not None
        return self.store

    def _failed(self, action: str, err: StoreError) -> None:
        """A store failure costs at most a later miss: logged and counted, not raised."""
        self.metrics.store_failures += 1
        log.event("strict_store_failed", action=action, sqlite_error=err.sqlite_error)

    def _skip(self, request_id: str, reason: Reason) -> None:
        self.metrics.skipped[reason.value] += 1
        log.event("strict_capture_skipped", request_id=request_id, reason=reason.value)
