"""What the caches already count, exposed when the registry is collected.

Read at scrape time from the stats objects the relay keeps anyway (the replay cache's
``CacheMetrics`` and ``ReplayStats``, the capacity ledger, the strict cache's
``StrictMetrics``) and from the store's five-second sample -- no second set of counters
to keep in step. Labels: body shapes, reason codes (fixed enums), configured provider
names; never a model name a client chose or an id.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from relay.core.receipts import Reason
from relay.core.replay_stats import ReplayStats
from relay.core.token_usage import LATENCY_BOUNDS_MS, OVERFLOW_MS, TALLY_FIELDS
from relay.errors import StoreError
from relay.ops.metrics import relay_metrics
from relay.ops.store_sample import StoreSampler
from relay.ops.token_stats import token_accounting

if TYPE_CHECKING:
    from relay.app.runtime import Runtime

BODY_SHAPES = ("chat", "responses")  # ReplayStats' scope kinds


def replay_totals(stats: ReplayStats) -> dict[str, int]:
    """Dispatched, accepted and resent since startup, over every scope."""
    totals = {"dispatched": 0, "accepted": 0, "resent": 0}
    for (_, _, outcome), n in stats.outcomes.items():
        totals[outcome] += n
    return totals


class RuntimeCollector(Collector):
    def __init__(self, runtime: Runtime, sampler: StoreSampler) -> None:
        self.runtime = runtime
        self.sampler = sampler

    def describe(self) -> Iterable[Metric]:
        return []  # collected lazily: registering must not read the store

    def collect(self) -> Iterator[Metric]:
        runtime = self.runtime
        clock = runtime.clock
        metrics = relay_metrics(runtime)
        uptime = GaugeMetricFamily("relay_uptime_seconds", "Seconds since the relay started")
        uptime.add_metric([], clock.monotonic() - metrics.started_monotonic)
        yield uptime
        yield from self._replay()
        yield from self._cache()
        yield from self._strict()
        yield from self._store()
        yield from self._shared()
        yield from self._tokens()

    def _replay(self) -> Iterator[Metric]:
        stats = self.runtime.cache.metrics.replay
        # Both body shapes always, so a rate over them never starts from a missing series.
        by_kind: dict[str, Counter[str]] = {
            outcome: Counter(dict.fromkeys(BODY_SHAPES, 0))
            for outcome in ("dispatched", "accepted", "resent")
        }
        for (kind, _model, outcome), n in stats.outcomes.items():
            by_kind.setdefault(outcome, Counter())[kind] += n
        for outcome, text in (
            ("dispatched", "Requests sent upstream with at least one replayed block"),
            ("accepted", "Replaying requests the upstream answered 2xx"),
            ("resent", "Refused replays sent once more without replay"),
        ):
            family = CounterMetricFamily(f"relay_replay_{outcome}", text, labels=["kind"])
            for kind, n in sorted(by_kind.get(outcome, Counter()).items()):
                family.add_metric([kind], n)
            yield family
        rejected = CounterMetricFamily(
            "relay_replay_rejected",
            "Replaying requests the upstream refused, by rejection reason",
            labels=["kind", "reason"],
        )
        tally: Counter[tuple[str, str]] = Counter()
        for (kind, _model, why), n in stats.rejected.items():
            tally[kind, why.value] += n
        for (kind, label), n in sorted(tally.items()):
            rejected.add_metric([kind, label], n)
        yield rejected

    def _cache(self) -> Iterator[Metric]:
        cache = self.runtime.cache
        m = cache.metrics
        requests = CounterMetricFamily(
            "relay_cache_requests", "Requests the replay cache considered"
        )
        requests.add_metric([], m.requests)
        yield requests
        skipped = CounterMetricFamily(
            "relay_cache_skipped", "Requests sent without the cache, by reason", labels=["reason"]
        )
        for reason, n in sorted(m.skipped.items()):
            skipped.add_metric([reason], n)
        yield skipped
        bypasses = CounterMetricFamily(
            "relay_cache_bypasses",
            "Generations sent unobserved because no cache session could be afforded",
        )
        bypasses.add_metric([], m.skipped.get(Reason.CAPACITY_BYPASS.value, 0))
        yield bypasses
        blocks = CounterMetricFamily(
            "relay_cache_replayed_blocks", "Replayed blocks dispatched (not acceptance)"
        )
        blocks.add_metric([], m.replayed_blocks)
        yield blocks
        fenced = CounterMetricFamily(
            "relay_cache_fenced", "Unobservable generations that fenced their scopes"
        )
        fenced.add_metric([], m.fenced)
        yield fenced
        fences = CounterMetricFamily(
            "relay_fences",
            "Generations that fenced their scopes (replay stops for that credential), by "
            "reason: direct_responses, or why a Responses-shaped history was underivable",
            labels=["reason"],
        )
        for reason, n in sorted(m.fences.items()):
            fences.add_metric([reason], n)
        yield fences
        capacity = cache.capacity
        sessions = GaugeMetricFamily("relay_cache_sessions", "Cache sessions in progress")
        sessions.add_metric([], capacity.sessions)
        yield sessions
        limit = GaugeMetricFamily(
            "relay_cache_sessions_limit",
            "Cache sessions possible at once: REASONING_CACHE_MAX_CONCURRENT, or fewer when "
            "the memory budget cannot fit that many",
        )
        limit.add_metric([], capacity.budget.effective_concurrent)
        yield limit
        budget = GaugeMetricFamily(
            "relay_cache_capacity_bytes",
            "Session accounting bytes in use and available",
            labels=["state"],
        )
        budget.add_metric(["in_use"], capacity.in_use)
        budget.add_metric(["limit"], capacity.budget.session_bytes)
        yield budget

    def _tokens(self) -> Iterator[Metric]:
        """Token accounting since start (relay.ops.token_stats), by body shape, model (a
        bounded label: the first 32 names seen, then "other") and replay outcome."""
        tokens = token_accounting(self.runtime)
        if tokens is None:
            return
        requests = CounterMetricFamily(
            "relay_replay_outcome_requests",
            "Relayed requests by replay outcome (replayed, nothing_to_replay, bypass_*, "
            "cache_off, ...)",
            labels=["kind", "model", "outcome"],
        )
        blocks = CounterMetricFamily(
            "relay_replay_outcome_blocks",
            "Replayed blocks of the requests counted in relay_replay_outcome_requests",
            labels=["kind", "model", "outcome"],
        )
        used = CounterMetricFamily(
            "relay_upstream_tokens",
            "The upstream's usage, by replay outcome and type: input, cached (input served "
            "from the prompt cache), cache_write, output, reasoning",
            labels=["kind", "model", "outcome", "type"],
        )
        names = {name: name.removesuffix("_tokens") for name in TALLY_FIELDS
                 if name.endswith("_tokens")}  # fmt: skip
        for key, tally in sorted(tokens.since_start.by_key.items()):
            labels = [key.shape, key.model, key.outcome]
            requests.add_metric(labels, tally.requests)
            blocks.add_metric(labels, tally.blocks)
            for field, label in names.items():
                used.add_metric([*labels, label], getattr(tally, field))
        yield requests
        yield blocks
        yield used
        added = HistogramMetricFamily(
            "relay_added_time_to_first_byte_seconds",
            "The relay's own share of a request's time to first byte: arrival to first "
            "byte, less the wait for the upstream's first event",
        )
        cumulative, buckets = 0, []
        for bound in (*LATENCY_BOUNDS_MS, OVERFLOW_MS):
            cumulative += tokens.latency_since_start.get(bound, 0)
            edge = "+Inf" if bound == OVERFLOW_MS else str(bound / 1000)
            buckets.append((edge, cumulative))
        added.add_metric([], buckets, tokens.latency_sum_s)
        yield added

    def _strict(self) -> Iterator[Metric]:
        m = self.runtime.strict.metrics
        for name, counter, text in (
            ("relay_strict_restored", m.hits, "Messages whose reasoning_content was restored"),
            ("relay_strict_missed", m.misses, "Messages that needed reasoning none was stored"),
            ("relay_strict_stripped", m.stripped, "Messages whose reasoning_content was stripped"),
        ):
            by_provider: Counter[str] = Counter()
            for (provider, _model), n in counter.items():
                by_provider[provider] += n
            family = CounterMetricFamily(name, text, labels=["provider"])
            for provider, n in sorted(by_provider.items()):
                family.add_metric([provider], n)
            yield family

    def _shared(self) -> Iterator[Metric]:
        """The store kind, and on a shared store its live instances and their leases
        (read from the database at each scrape: a handful of rows)."""
        runtime = self.runtime
        if runtime.cache.store is None:
            return
        kind = GaugeMetricFamily(
            "relay_cache_store_info", "The replay store in use", labels=["kind"]
        )
        kind.add_metric(["sqlite" if runtime.leases is None else "postgresql"], 1)
        yield kind
        if runtime.leases is None:
            return
        try:
            live = runtime.leases.store.live_instances()
        except StoreError:
            return  # the scrape still answers; status shows the failures
        instances = GaugeMetricFamily(
            "relay_shared_live_instances", "Relays holding a live lease on the shared store"
        )
        instances.add_metric([], len(live))
        yield instances
        lease = GaugeMetricFamily(
            "relay_shared_lease_expires_in_seconds",
            "Seconds until each live instance's lease lapses, by the database's clock",
            labels=["instance", "self"],
        )
        own = runtime.leases.store.instance_id
        for instance in live:
            lease.add_metric([instance.id, str(instance.id == own).lower()], instance.expires_in_s)
        yield lease
        for name, value, text in (
            ("relay_shared_lease_lapses", runtime.leases.store.lease_lapses,
             "Times this relay found its lease lapsed and registered as a new instance"),
            ("relay_shared_recovered_intents", runtime.leases.recovered,
             "Intents of lapsed instances this relay poisoned and removed"),
        ):  # fmt: skip
            counter = CounterMetricFamily(name, text)
            counter.add_metric([], value)
            yield counter

    def _store(self) -> Iterator[Metric]:
        try:
            sample = self.sampler.sample()
        except StoreError:
            sample = None  # the scrape still answers; status shows the error
        if sample is None:
            return
        agg = sample.aggregates
        size = GaugeMetricFamily(
            "relay_store_size_bytes", "The store's files on disk", labels=["file"]
        )
        size.add_metric(["main"], agg.file_bytes)
        size.add_metric(["wal"], agg.wal_bytes)
        yield size
        payloads = GaugeMetricFamily(
            "relay_store_payloads", "Stored payloads (a lower bound when not exact)"
        )
        payloads.add_metric([], agg.counts["payloads"].value)
        yield payloads
        payload_bytes = GaugeMetricFamily(
            "relay_store_payload_bytes", "Serialized payload bytes (a lower bound when not exact)"
        )
        payload_bytes.add_metric([], agg.payload_bytes.value)
        yield payload_bytes
        exact = GaugeMetricFamily(
            "relay_store_aggregate_exact",
            "1 when a store aggregate is exact, 0 when its bounded scan stopped early",
            labels=["aggregate"],
        )
        exact.add_metric(["payloads"], int(agg.counts["payloads"].exact))
        exact.add_metric(["payload_bytes"], int(agg.payload_bytes.exact))
        yield exact
        if agg.oldest_payload_touched_at is not None:
            age = GaugeMetricFamily(
                "relay_store_oldest_payload_age_seconds",
                "Idle age of the least recently touched payload",
            )
            age.add_metric([], max(0.0, sample.sampled_wall - agg.oldest_payload_touched_at))
            yield age
