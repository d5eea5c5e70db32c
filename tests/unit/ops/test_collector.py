"""relay.ops.collector: the Prometheus families read at scrape time from the counters the
caches keep, on a real runtime (replay store in a temp dir, manual clock) -- summed over
models, every body shape present from the start, the store's sample read only on a scrape
and a failing one leaving the rest of the scrape intact."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.registry import CollectorRegistry

from relay.core.rejection import RejectionKind
from relay.core.replay_stats import ReplayStats
from relay.core.token_usage import Usage
from relay.errors import StoreError
from relay.ops.collector import BODY_SHAPES, RuntimeCollector, replay_totals
from relay.ops.token_stats import TokenAccounting
from tests.support.ops_runtime import OpsRuntime, ops_runtime
from tests.support.store_builder import build_store

OUTCOMES = ("dispatched", "accepted", "resent")


def scrape(ops: OpsRuntime) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RuntimeCollector(ops.runtime, ops.sampler))
    return registry


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(BODY_SHAPES), st.sampled_from(["gpt-5", "o3", "gpt-5-mini"]),
            st.sampled_from(OUTCOMES),
        ),
        max_size=40,
    )
)  # fmt: skip
def test_replay_totals_count_every_event_once_over_every_scope(
    events: list[tuple[str, str, str]],
) -> None:
    stats = ReplayStats()
    for kind, model, outcome in events:
        stats.count(kind, model, outcome)  # type: ignore[arg-type]
    totals = replay_totals(stats)
    assert set(totals) == set(OUTCOMES)
    for outcome in OUTCOMES:
        assert totals[outcome] == sum(1 for _, _, o in events if o == outcome)


def test_every_body_shape_is_exported_before_any_replay(tmp_path: Path) -> None:
    with ops_runtime(tmp_path) as ops:
        registry = scrape(ops)
        for outcome in OUTCOMES:
            for kind in BODY_SHAPES:
                assert value(registry, f"relay_replay_{outcome}_total", kind=kind) == 0


def test_replay_counts_are_summed_over_models_by_kind_and_reason(tmp_path: Path) -> None:
    with ops_runtime(tmp_path) as ops:
        replay = ops.runtime.cache.metrics.replay
        for model in ("gpt-5", "o3", "o3"):
            replay.count("chat", model, "dispatched")
        replay.count("responses", "gpt-5", "accepted")
        invalid = RejectionKind.INVALID_ENCRYPTED_CONTENT
        replay.count_rejected("chat", "gpt-5", invalid)
        replay.count_rejected("chat", "o3", invalid)
        replay.count_rejected("responses", "o3", RejectionKind.ITEM_NOT_FOUND)
        registry = scrape(ops)
        assert value(registry, "relay_replay_dispatched_total", kind="chat") == 3
        assert value(registry, "relay_replay_dispatched_total", kind="responses") == 0
        assert value(registry, "relay_replay_accepted_total", kind="responses") == 1
        rejected = "relay_replay_rejected_total"
        assert value(registry, rejected, kind="chat", reason=invalid.value) == 2
        assert value(registry, rejected, kind="responses", reason="item_not_found") == 1
        assert value(registry, rejected, kind="responses", reason=invalid.value) is None
        # No label carries a model name a client chose.
        labels = {k for m in registry.collect() for s in m.samples for k in s.labels}
        assert "model" not in labels


def test_cache_and_capacity_families(tmp_path: Path) -> None:
    with ops_runtime(tmp_path) as ops:
        m = ops.runtime.cache.metrics
        m.requests = 11
        m.skipped.update({"capacity_bypass": 2, "canonical_limit": 1})
        m.replayed_blocks, m.fenced = 5, 3
        capacity = ops.runtime.cache.capacity
        lease = capacity.try_acquire(1000)
        assert lease is not None
        try:
            registry = scrape(ops)
            assert value(registry, "relay_cache_requests_total") == 11
            assert value(registry, "relay_cache_skipped_total", reason="canonical_limit") == 1
            assert value(registry, "relay_cache_bypasses_total") == 2
            assert value(registry, "relay_cache_replayed_blocks_total") == 5
            assert value(registry, "relay_cache_fenced_total") == 3
            assert value(registry, "relay_cache_sessions") == 1
            limit = capacity.budget.effective_concurrent
            assert value(registry, "relay_cache_sessions_limit") == limit
            in_use = value(registry, "relay_cache_capacity_bytes", state="in_use")
            assert in_use == capacity.in_use and in_use is not None and in_use >= 1000
            budget = capacity.budget.session_bytes
            assert value(registry, "relay_cache_capacity_bytes", state="limit") == budget
        finally:
            capacity.release(lease)
        assert value(scrape(ops), "relay_cache_sessions") == 0


def test_strict_counts_are_summed_over_models_by_provider(tmp_path: Path) -> None:
    with ops_runtime(tmp_path) as ops:
        strict = ops.runtime.strict.metrics
        strict.hits.update({("deepseek", "r1"): 2, ("deepseek", "chat"): 3, ("kimi", "k2"): 1})
        strict.misses.update({("kimi", "k2"): 4})
        registry = scrape(ops)
        assert value(registry, "relay_strict_restored_total", provider="deepseek") == 5
        assert value(registry, "relay_strict_restored_total", provider="kimi") == 1
        assert value(registry, "relay_strict_missed_total", provider="kimi") == 4
        assert value(registry, "relay_strict_missed_total", provider="deepseek") is None
        assert value(registry, "relay_strict_stripped_total", provider="kimi") is None


def test_uptime_follows_the_clock(tmp_path: Path) -> None:
    with ops_runtime(tmp_path) as ops:
        ops.clock.advance(42.0)
        assert value(scrape(ops), "relay_uptime_seconds") == 42.0


def test_registering_reads_nothing_and_each_scrape_uses_the_sample(tmp_path: Path) -> None:
    with ops_runtime(tmp_path) as ops:
        registry = scrape(ops)
        assert ops.sampler.reads == 0  # describe() is lazy: registering must not read the store
        assert value(registry, "relay_store_payloads") == 0
        assert value(registry, "relay_store_aggregate_exact", aggregate="payloads") == 1
        size = value(registry, "relay_store_size_bytes", file="main")
        assert size is not None and size > 0
        # An empty store has no payload to age.
        assert value(registry, "relay_store_oldest_payload_age_seconds") is None
        assert value(registry, "relay_store_payload_bytes") == 0
        assert ops.sampler.reads == 1


def test_no_store_families_without_a_store(tmp_path: Path) -> None:
    with ops_runtime(tmp_path, cache=False) as ops:
        names = {m.name for m in scrape(ops).collect()}
        assert not any(name.startswith("relay_store_") for name in names)
        assert "relay_cache_requests" in names


def test_a_failing_sample_leaves_the_rest_of_the_scrape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ops_runtime(tmp_path) as ops:

        def broken() -> None:
            raise StoreError("the replay store failed: disk I/O error")

        monkeypatch.setattr(ops.sampler, "sample", broken)
        names = {m.name for m in scrape(ops).collect()}
        assert not any(name.startswith("relay_store_") for name in names)
        assert {"relay_uptime_seconds", "relay_replay_dispatched", "relay_strict_restored"} <= names


def test_payloads_and_the_oldest_payload_s_idle_age(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    build_store(path, "tt", "c")  # three admitted answers, each with its payload
    with ops_runtime(tmp_path, REASONING_CACHE_PATH=str(path)) as ops:
        ops.clock.advance(100.0)  # the builder's clock started where this one did
        registry = scrape(ops)
        assert value(registry, "relay_store_payloads") == 3
        payload_bytes = value(registry, "relay_store_payload_bytes")
        assert payload_bytes is not None and payload_bytes > 0
        age = value(registry, "relay_store_oldest_payload_age_seconds")
        assert age is not None and age >= 100.0


def test_token_accounting_is_exported_by_outcome_and_type(tmp_path: Path) -> None:
    with ops_runtime(tmp_path) as ops:
        assert value(scrape(ops), "relay_replay_outcome_requests_total",
                     kind="chat", model="gpt-5", outcome="replayed") is None  # fmt: skip
        tokens = ops.runtime.tokens = TokenAccounting(ops.clock, None, retention_days=0)
        tokens.answered("chat", "gpt-5", "replayed=3", Usage(1000, 800, 0, 50, 30))
        tokens.answered("chat", "gpt-5", "replayed=1", Usage(1000, 900, 0, 50, 20))
        tokens.answered("responses", "gpt-5", "none; reason=responses_passthrough", None)
        tokens.added_latency(0.0015)
        tokens.added_latency(0.2)
        registry = scrape(ops)
        chat = {"kind": "chat", "model": "gpt-5", "outcome": "replayed"}
        assert value(registry, "relay_replay_outcome_requests_total", **chat) == 2
        assert value(registry, "relay_replay_outcome_blocks_total", **chat) == 4
        for kind, n in (("input", 2000), ("cached", 1700), ("cache_write", 0),
                        ("output", 100), ("reasoning", 50)):  # fmt: skip
            assert value(registry, "relay_upstream_tokens_total", **chat, type=kind) == n
        fenced = {"kind": "responses", "model": "gpt-5", "outcome": "bypass_fenced"}
        assert value(registry, "relay_replay_outcome_requests_total", **fenced) == 1
        assert value(registry, "relay_upstream_tokens_total", **fenced, type="input") == 0
        name = "relay_added_time_to_first_byte_seconds"
        assert value(registry, f"{name}_bucket", le="0.002") == 1
        assert value(registry, f"{name}_bucket", le="0.25") == 2
        assert value(registry, f"{name}_bucket", le="+Inf") == 2
        assert value(registry, f"{name}_count") == 2
        assert value(registry, f"{name}_sum") == pytest.approx(0.2015)
