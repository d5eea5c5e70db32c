"""relay.app.runtime: what every handler shares, and the per-provider views built from it."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.app.runtime import Runtime
from relay.cache.replay_cache import ReplayCache, UpstreamIdentity
from relay.clock import ManualClock
from relay.ops.metrics import RelayMetrics
from relay.settings.config import load_config
from relay.settings.providers import BUILTIN, Provider
from relay.strict.strict_cache import StrictCache
from relay.transport.upstream import make_http_client

BUILTIN_PROVIDER = Provider(BUILTIN, "responses", "https://api.openai.com/v1", "sk-builtin",
                            api_key_env="OPENAI_API_KEY")  # fmt: skip
DEEPSEEK = Provider("deepseek", "chat", "https://api.deepseek.com/v1", "sk-ds",
                    api_key_env="DEEPSEEK_API_KEY")  # fmt: skip
AZURE = Provider("azure", "responses", "https://example.openai.azure.com/openai/v1", "az-key",
                 api_key_env="AZURE_KEY")  # fmt: skip


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    """A runtime as the server builds one, cache off (nothing touches the disk)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    config = load_config({"RELAY_DATA_DIR": str(tmp_path), "OPENAI_API_KEY": "sk-builtin",
                          "RELAY_IDLE_TIMEOUT_MS": "2500", "RELAY_MAX_RESPONSE_BYTES": "4096",
                          "RELAY_MAX_SSE_EVENT_BYTES": "2048"})  # fmt: skip
    clock = ManualClock()
    cache = ReplayCache.open(config, clock, upstream_url=BUILTIN_PROVIDER.url,
                             upstream_credential="sk-builtin", relay_token="rr-token-0123456789",
                             new_id=Runtime.new_id)  # fmt: skip
    strict = StrictCache(clock=clock, store=None, relay_token="rr-token-0123456789", ttl_s=60,
                         memory_entries=0, max_entry_bytes=1024)  # fmt: skip
    client = make_http_client(clock)
    yield Runtime(
        config=config,
        clock=clock,
        relay_token="rr-token-0123456789",
        upstream_url=BUILTIN_PROVIDER.url,
        upstream_api_key="sk-builtin",
        http_client=client,
        cache=cache,
        strict=strict,
        providers={BUILTIN: BUILTIN_PROVIDER, "deepseek": DEEPSEEK, "azure": AZURE},
        metrics=RelayMetrics(),
    )
    client.close()
    cache.close()
    loop.close()
    asyncio.set_event_loop(None)
    assert list(tmp_path.iterdir()) == []  # cache off: no file was made


def test_upstream_limits_come_from_the_configuration_in_seconds_and_bytes(
    runtime: Runtime,
) -> None:
    limits = runtime.upstream_limits
    assert (limits.idle_timeout_s, limits.max_response_bytes, limits.max_sse_event_bytes) == (
        2.5, 4096, 2048,
    )  # fmt: skip


def test_headers_carry_the_provider_s_own_key_and_the_answer_kind(runtime: Runtime) -> None:
    assert runtime.builtin_provider is BUILTIN_PROVIDER
    assert runtime.upstream_headers() == {
        "Authorization": "Bearer sk-builtin",
        "Content-Type": "application/json",
        "Accept": "text/event-stream",
    }
    assert runtime.headers_for(DEEPSEEK, json_answer=True) == {
        "Authorization": "Bearer sk-ds",
        "Content-Type": "application/json",
        "Accept": "application/json",
    }


def test_the_cache_sees_a_configured_responses_provider_by_origin_endpoint_and_key(
    runtime: Runtime,
) -> None:
    assert runtime.cache_identity(BUILTIN_PROVIDER) is None  # the built-in: the cache's own
    assert runtime.cache_identity(AZURE) == UpstreamIdentity(
        "https://example.openai.azure.com", "/openai/v1/responses", "az-key"
    )


def test_the_reach_hint_names_what_to_check(runtime: Runtime) -> None:
    assert runtime.reach_hint(BUILTIN_PROVIDER) == "check OPENAI_BASE_URL and the network"
    assert runtime.reach_hint(DEEPSEEK) == (
        "check RELAY_PROVIDERS['deepseek'].base_url and the network"
    )


def test_new_ids_are_prefixed_random_and_distinct() -> None:
    ids = {Runtime.new_id("chatcmpl-") for _ in range(200)}
    assert len(ids) == 200
    assert all(re.fullmatch(r"chatcmpl-[0-9a-f]{24}", i) for i in ids)


def test_a_fresh_runtime_is_live_and_idle(runtime: Runtime) -> None:
    assert (runtime.shutting_down, runtime.active, runtime.sessions) == (False, set(), set())
