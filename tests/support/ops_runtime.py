"""A relay's runtime as ``relay.app.server`` assembles it, without its listeners, for the
operating tests (relay.ops): the replay cache on a real store in a temp dir (or off), the
strict cache, a manual clock, and the store sample and snapshotter the admin socket uses."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from relay.app.runtime import Runtime
from relay.cache.replay_cache import ReplayCache
from relay.clock import ManualClock
from relay.ops.metrics import RelayMetrics, relay_metrics
from relay.ops.snapshot import Snapshotter
from relay.ops.store_sample import StoreSampler
from relay.settings.config import load_config
from relay.settings.providers import BUILTIN, Provider
from relay.strict.strict_cache import StrictCache
from relay.transport.upstream import make_http_client

UPSTREAM = "https://api.openai.com/v1"
TOKEN = "rr-ops-token-0123456789"


@dataclass
class OpsRuntime:
    runtime: Runtime
    clock: ManualClock
    sampler: StoreSampler
    snapshots: Snapshotter
    loop: asyncio.AbstractEventLoop


@contextmanager
def ops_runtime(tmp_path: Path, *, cache: bool = True, **env: str) -> Iterator[OpsRuntime]:
    """The runtime, on its own event loop (set as the current one while it lives)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    config = load_config({
        "RELAY_DATA_DIR": str(tmp_path / "data"), "OPENAI_API_KEY": "sk-ops",
        "OPENAI_BASE_URL": UPSTREAM, "REASONING_CACHE_ENABLED": "1" if cache else "0", **env,
    })  # fmt: skip
    clock = ManualClock()
    builtin = Provider(BUILTIN, "responses", UPSTREAM, "sk-ops", api_key_env="OPENAI_API_KEY")
    replay = ReplayCache.open(
        config, clock, upstream_url=builtin.url, upstream_credential="sk-ops",
        relay_token=TOKEN, new_id=Runtime.new_id,
    )  # fmt: skip
    strict = StrictCache(
        clock=clock, store=replay.store if replay.enabled else None, relay_token=TOKEN,
        ttl_s=60, memory_entries=8, max_entry_bytes=1024,
    )  # fmt: skip
    client = make_http_client(clock)
    runtime = Runtime(
        config=config, clock=clock, relay_token=TOKEN, upstream_url=builtin.url,
        upstream_api_key="sk-ops", http_client=client, cache=replay, strict=strict,
        providers={**config.providers, BUILTIN: builtin}, metrics=RelayMetrics(),
    )  # fmt: skip
    relay_metrics(runtime).started(clock.monotonic(), clock.wall())
    sampler = StoreSampler(replay.store, clock)
    snapshots = Snapshotter(replay.store, tmp_path / "snapshots", clock)
    try:
        yield OpsRuntime(runtime, clock, sampler, snapshots, loop)
    finally:
        loop.run_until_complete(snapshots.wait_idle())
        client.close()
        replay.close()
        loop.close()
        asyncio.set_event_loop(None)
