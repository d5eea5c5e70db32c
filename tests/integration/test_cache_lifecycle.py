"""Cache lifecycle over real loopback servers: coverage gaps, fencing by direct Responses
traffic, capacity bypass, exclusive ownership."""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest
import requests

from relay.app.server import RelayServer
from relay.errors import ConfigError, StoreLocked
from relay.settings.config import load_config
from relay.storage.recovery import COVERAGE_GAP_KEY
from tests.support.cache_stack import CACHE_ON, ask, continuity, writes_fail
from tests.support.stack import Stack, running_stack


def conversation(stack: Stack, prompt: str = "hi") -> list[dict[str, Any]]:
    """One answered turn and a follow-up question: replayable history."""
    text = ask(stack, [{"role": "user", "content": prompt}], stream=True)
    return [
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": text},
        {"role": "user", "content": "next"},
    ]


def restart(stack: Stack, **env: str) -> None:
    stack.loop.run(stack.relay.stop())
    stack.config = dataclasses.replace(
        stack.config, reasoning_cache_enabled=env.get("REASONING_CACHE_ENABLED") == "1"
    )
    stack.relay = RelayServer(stack.config)
    stack.loop.run(stack.relay.start())


def gap(stack: Stack) -> bool:
    assert stack.relay.runtime is not None and stack.relay.runtime.cache.store is not None
    return stack.relay.runtime.cache.store.meta(COVERAGE_GAP_KEY) is not None


def test_a_disabled_interval_stops_old_replays(cached: Stack) -> None:
    history = conversation(cached)
    restart(cached, REASONING_CACHE_ENABLED="0")
    assert (cached.config.cache_path).exists() and not gap(cached)  # owned, no gap yet
    assert continuity(ask(cached, history, stream=True)) == (0, 0, 0)  # served, unobserved
    assert gap(cached)
    # Once per process: the next request writes nothing (a failing store does not matter).
    with writes_fail(cached):
        assert continuity(ask(cached, history, stream=False)) == (0, 0, 0)
    restart(cached, REASONING_CACHE_ENABLED="1")
    assert continuity(ask(cached, history, stream=True)) == (0, 0, 0)
    # New records made after the gap replay again.
    fresh = conversation(cached, "a new question")
    assert continuity(ask(cached, fresh, stream=False)) == (1, 1, 0)


@pytest.mark.parametrize("stream", [True, False])
def test_direct_responses_traffic_is_relayed_and_fences(cached: Stack, stream: bool) -> None:
    history = conversation(cached)
    with cached.openai() as client:
        if stream:
            with client.responses.create(model="gpt-5", input="direct", stream=True) as events:
                kinds = [event.type for event in events]
            assert kinds[0] == "response.created"
            assert kinds[-1] == "response.completed"
        else:
            response = client.responses.create(model="gpt-5", input="direct")
            assert response.status == "completed"
            assert "Echo: direct" in response.output_text
    assert cached.relay.runtime is not None
    assert cached.relay.runtime.cache.metrics.fenced == 1
    assert continuity(ask(cached, history, stream=True)) == (0, 0, 0)


def test_fencing_is_per_caller_when_the_caller_is_known(cached: Stack) -> None:
    text = ask(cached, [{"role": "user", "content": "hi"}], stream=True, user="alice")
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": text},
        {"role": "user", "content": "next"},
    ]
    with cached.openai() as client:
        client.responses.create(model="gpt-5", input="direct", user="bob")
    assert continuity(ask(cached, history, stream=True, user="alice")) == (1, 1, 0)
    with cached.openai() as client:
        client.responses.create(model="gpt-5", input="direct")  # no caller: all callers
    assert continuity(ask(cached, history, stream=True, user="alice")) == (0, 0, 0)


def test_an_unwritable_fence_refuses_the_direct_call(cached: Stack) -> None:
    with (
        writes_fail(cached),
        cached.openai() as client,
        pytest.raises(openai.APIStatusError) as err,
    ):
        client.responses.create(model="gpt-5", input="direct")
    assert err.value.status_code == 503
    assert cached.fake.requests == []


def test_direct_responses_traffic_while_disabled_records_the_gap(cached: Stack) -> None:
    history = conversation(cached)
    restart(cached, REASONING_CACHE_ENABLED="0")
    with cached.openai() as client:
        client.responses.create(model="gpt-4.1", input="direct")  # fenced when on: any model
    assert gap(cached)
    restart(cached, REASONING_CACHE_ENABLED="1")
    assert continuity(ask(cached, history, stream=True)) == (0, 0, 0)


@pytest.mark.parametrize("direct", [False, True], ids=["chat", "responses"])
def test_an_unwritable_gap_refuses_the_request(cached: Stack, direct: bool) -> None:
    history = conversation(cached)
    restart(cached, REASONING_CACHE_ENABLED="0")
    sent = cached.fake.received
    with writes_fail(cached):
        body: dict[str, Any] = {"model": "gpt-5"}
        if direct:
            url, body["input"] = "responses", "direct"
        else:
            url, body["messages"] = "chat/completions", history
        refused = requests.post(
            f"{cached.base_url}/{url}", json=body, headers=cached.headers(), timeout=30
        )
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "cache_unavailable"
    assert cached.fake.received == sent, "never forwarded without the gap"
    assert not gap(cached)
    # A safety write that failed twice latches, as with the cache on: refused until the
    # operator frees space and deletes the .guard the message names.
    assert cached.config.cache_path.with_name("reasoning-cache.sqlite.guard").exists()
    with cached.openai() as client, pytest.raises(openai.APIStatusError) as again:
        client.chat.completions.create(model="gpt-5", messages=history)
    assert again.value.status_code == 503 and ".guard" in again.value.message
    assert cached.fake.received == sent


def test_over_capacity_requests_are_served_uncached_and_poisoned(tmp_path: Path) -> None:
    env = {**CACHE_ON, "REASONING_CACHE_MAX_CONCURRENT": "1"}
    with running_stack(tmp_path / "data", env) as stack:
        stack.script({"toxics": {"latency_ms": 100}})  # holds the only session a while
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(conversation, stack)
            stack.loop.run(stack.fake.wait_for_requests(1, ended=False))
            overflow = ask(stack, [{"role": "user", "content": "other"}], stream=True)
            held = first.result(timeout=20)
        assert stack.relay.runtime is not None
        assert stack.relay.runtime.cache.metrics.skipped["capacity_bypass"] == 1
        # The held conversation was observed and replays; the overflow was poisoned.
        assert continuity(ask(stack, held, stream=True)) == (1, 1, 0)
        other = [
            {"role": "user", "content": "other"},
            {"role": "assistant", "content": overflow},
            {"role": "user", "content": "next"},
        ]
        assert continuity(ask(stack, other, stream=True)) == (0, 0, 0)


def test_a_second_relay_on_the_same_store_is_refused(cached: Stack) -> None:
    # Without an admin socket: the default one would refuse it first (test_serve_settings).
    second = RelayServer(dataclasses.replace(cached.config, admin_socket=None))
    with pytest.raises(StoreLocked, match="another relay process"):
        cached.loop.run(second.start())
    assert continuity(ask(cached, [{"role": "user", "content": "still"}], stream=True)) == (0, 0, 0)


def test_a_budget_too_small_fails_startup_clearly() -> None:
    with pytest.raises(ConfigError, match="REASONING_CACHE_MEMORY_BYTES"):
        load_config({**CACHE_ON, "REASONING_CACHE_MEMORY_BYTES": str(20 * 1024 * 1024)})
    load_config({"REASONING_CACHE_MEMORY_BYTES": str(20 * 1024 * 1024)})  # off: not checked


def test_passthrough_bad_input_is_a_clear_400(cached: Stack) -> None:
    resp = requests.post(
        f"{cached.base_url}/responses", data=b"[1]", headers=cached.headers(), timeout=10
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["type"] == "invalid_request_error"
