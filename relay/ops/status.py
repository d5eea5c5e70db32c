"""``relay admin status``: the runtime counters and the store's aggregates, as JSON.

Runtime counters start at process startup; dispatched replay is not upstream acceptance
(an accepted replay is one the upstream answered 2xx). Store aggregates come from the
five-second sample (relay.ops.store_sample): bounded scans, each labelled exact or a lower
bound. Building this reads counters and that sample only: it touches no payload, renews
no intent, moves no retention clock, checkpoints nothing and runs no cleanup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from relay import __version__
from relay.cache.replay_cache import FENCE_REASON_TEXT
from relay.errors import StoreError
from relay.ops.collector import replay_totals
from relay.ops.metrics import relay_metrics
from relay.ops.snapshot import Snapshotter
from relay.ops.store_sample import TTL_S, StoreSampler
from relay.ops.token_stats import token_accounting
from relay.transport.upstream import origin_of

if TYPE_CHECKING:
    from relay.app.runtime import Runtime


def cache_state(runtime: Runtime) -> str:
    if runtime.cache.enabled:
        return "on"
    return "off (store kept)" if runtime.cache.store is not None else "off"


def store_kind(runtime: Runtime) -> str | None:
    if runtime.cache.store is None:
        return None
    return "sqlite" if runtime.leases is None else "postgresql"


def tunnel_status(runtime: Runtime) -> dict[str, Any] | None:
    """RELAY_TUNNEL_CMD's program: its state and public URL (``None``: no tunnel)."""
    if runtime.config.tunnel_command is None:
        return None
    tunnel = runtime.tunnel
    if tunnel is None:
        return {"state": "starting", "url": None, "program": runtime.config.tunnel_command.program}
    return {"state": tunnel.state, "url": tunnel.url, "program": tunnel.command.program}


def status_document(
    runtime: Runtime,
    sampler: StoreSampler,
    snapshots: Snapshotter,
    *,
    offline_fake: bool,
    metrics_url: str | None = None,
) -> dict[str, Any]:
    clock, metrics, cache = runtime.clock, relay_metrics(runtime), runtime.cache
    now = clock.monotonic()
    replay = cache.metrics.replay
    totals = replay_totals(replay)
    metrics.replay_history.record(now, totals)
    hour, covered = metrics.replay_history.growth(now, totals)
    fences = cache.metrics.fences
    metrics.fence_history.record(now, fences)
    fenced_hour, fence_window = metrics.fence_history.growth(now, fences)
    strict = runtime.strict.metrics
    by_provider: dict[str, dict[str, int]] = {}
    for label, counter in (("restored", strict.hits), ("missed", strict.misses),
                           ("stripped", strict.stripped)):  # fmt: skip
        for (provider, _model), n in counter.items():
            row = by_provider.setdefault(provider, {"restored": 0, "missed": 0, "stripped": 0})
            row[label] += n
    store: dict[str, Any] | None
    try:
        sample = sampler.sample()
        store = None if sample is None else {
            **sample.aggregates.to_json(),
            "sampledAt": sample.sampled_wall,
            "sampleAgeSeconds": round(sample.age_s, 3),
            "cachedForSeconds": TTL_S,
        }  # fmt: skip
    except StoreError as err:
        store = {"error": str(err)}
    return {
        "ok": True,
        "relay": {
            "version": __version__,
            "uptimeSeconds": round(now - metrics.started_monotonic, 3),
            "startedAt": metrics.started_wall,
            "now": clock.wall(),
            "upstream": "offline fake" if offline_fake else origin_of(runtime.upstream_url),
            "cache": cache_state(runtime),
            # "sqlite" or "postgresql"; a shared store's instances and their leases.
            "storeKind": store_kind(runtime),
            "shared": None if runtime.leases is None else runtime.leases.to_json(),
            "shuttingDown": runtime.shutting_down,
            "tunnel": tunnel_status(runtime),
            "metricsUrl": metrics_url,
        },
        "requests": metrics.request_counts(),
        "replay": {
            **replay.to_json(),
            "lastHour": {**hour, "windowSeconds": round(covered, 3)},
        },
        "cache": {
            "requests": cache.metrics.requests,
            "skipped": dict(sorted(cache.metrics.skipped.items())),
            "bypasses": cache.metrics.skipped.get("capacity_bypass", 0),
            "activeSessions": len(runtime.sessions),
            "sessionLimit": cache.capacity.budget.effective_concurrent,
            "sessionLimitConfigured": cache.capacity.budget.max_concurrent,
            "capacityBytesInUse": cache.capacity.in_use,
            "capacityBytesLimit": cache.capacity.budget.session_bytes,
            "replayedBlocks": cache.metrics.replayed_blocks,
            "fenced": cache.metrics.fenced,
            "fencedByReason": dict(sorted(fences.items())),
            "fencedLastHour": {
                "count": sum(fenced_hour.values()),
                "windowSeconds": round(fence_window, 3),
                # most frequent first, each with what it means (relay status prints these)
                "reasons": [
                    {"code": code, "count": n, "text": FENCE_REASON_TEXT.get(code, code)}
                    for code, n in sorted(fenced_hour.items(), key=lambda kv: (-kv[1], kv[0]))
                    if n > 0
                ],
            },
        },
        "strict": dict(sorted(by_provider.items())),
        "errors": {
            "byReason": dict(sorted(metrics.errors.counts.items())),
            "latest": metrics.errors.latest(),
        },
        "store": store,
        # Token accounting by replay outcome (relay.ops.token_stats): None before startup.
        "replayBuys": None if (tokens := token_accounting(runtime)) is None else tokens.report(),
        "snapshot": {
            "running": snapshots.running,
            "progress": None if snapshots.progress is None else snapshots.progress.to_json(),
            "last": None if snapshots.last is None else snapshots.last.to_json(),
        },
    }
