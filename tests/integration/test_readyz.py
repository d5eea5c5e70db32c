"""``GET /readyz`` over real loopback servers: no token; 200 when the upstream is
reachable, the cache usable and the tunnel up (when configured), else 503 naming what
failed. The upstream evidence is the last model exchange, else a ``GET /models`` probe at
most once per ``FRESH_S`` (never a generation); ``/healthz`` stays the liveness check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
import requests

from relay.cache.disk_safety import DiskSafety
from relay.clock import ManualClock
from relay.upstream.health import FRESH_S
from tests.support.stack import Stack, running_stack


def readyz(stack: Stack) -> tuple[int, dict[str, Any]]:
    answer = requests.get(f"http://127.0.0.1:{stack.relay.port}/readyz", timeout=10)
    assert answer.headers["Content-Type"] == "application/json"
    return answer.status_code, answer.json()


def test_ready_probes_the_model_list_once_per_period_and_never_generates(tmp_path: Path) -> None:
    clock = ManualClock()
    with running_stack(tmp_path / "data", {"REASONING_CACHE_ENABLED": "1"}, clock=clock) as stack:
        assert readyz(stack) == (200, {"status": "ready", "checks": {
            "upstream": {"ok": True, "state": "answered", "checkedSecondsAgo": 0.0},
            "cache": {"ok": True, "state": "on"},
            "tunnel": {"ok": True, "state": "off"},
        }})  # fmt: skip
        assert stack.fake.models_listed == 1 and stack.fake.requests == []
        clock.advance(FRESH_S / 2)
        code, body = readyz(stack)
        assert code == 200 and body["checks"]["upstream"]["checkedSecondsAgo"] == FRESH_S / 2
        assert stack.fake.models_listed == 1  # fresh evidence: no second probe
        clock.advance(FRESH_S)
        assert readyz(stack)[0] == 200 and stack.fake.models_listed == 2
        health = requests.get(f"http://127.0.0.1:{stack.relay.port}/healthz", timeout=10)
        assert health.status_code == 200 and health.json() == {"status": "ok"}


def test_a_failed_exchange_makes_it_unready_until_the_upstream_answers_again(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    with running_stack(tmp_path / "data", clock=clock) as stack:
        down = {"status": 503, "type": "server_error", "message": "overloaded"}
        stack.script({"http_error": down})
        with stack.openai() as client, pytest.raises(openai.APIStatusError) as err:
            client.chat.completions.create(
                model="gpt-5", messages=[{"role": "user", "content": "hi"}]
            )
        assert err.value.status_code == 503
        code, body = readyz(stack)
        assert code == 503 and body["status"] == "not_ready"
        assert body["checks"]["upstream"] == {
            "ok": False, "state": "http_503", "checkedSecondsAgo": 0.0,
        }  # fmt: skip
        assert stack.fake.models_listed == 0  # the exchange was the evidence
        clock.advance(FRESH_S)
        assert readyz(stack)[0] == 200  # a probe: the model list answers
        assert stack.fake.models_listed == 1


def test_an_unreachable_upstream_is_unready(tmp_path: Path) -> None:
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    with running_stack(tmp_path / "data", env) as stack:
        code, body = readyz(stack)
        assert code == 503
        assert body["checks"]["upstream"]["ok"] is False
        assert body["checks"]["upstream"]["state"] == "unreachable"


def test_a_full_cache_is_unready(tmp_path: Path) -> None:
    # A disk limit the empty store already exceeds: no payload would be admitted.
    env = {"REASONING_CACHE_ENABLED": "1", "REASONING_CACHE_DISK_BYTES": str(64 * 1024)}
    with running_stack(tmp_path / "data", env) as stack:
        code, body = readyz(stack)
        assert code == 503
        assert body["checks"]["cache"] == {"ok": False, "state": "full", "reason": "disk_limit"}
        assert body["checks"]["upstream"]["ok"] is True


def test_a_latched_cache_is_unready(tmp_path: Path) -> None:
    with running_stack(tmp_path / "data", {"REASONING_CACHE_ENABLED": "1"}) as stack:
        runtime = stack.relay.runtime
        assert runtime is not None and isinstance(runtime.cache.safety, DiskSafety)
        runtime.cache.safety.guard.latched = True  # as DiskSafety latches after two failures
        code, body = readyz(stack)
        assert code == 503 and body["checks"]["cache"] == {"ok": False, "state": "latched"}
        runtime.cache.safety.guard.latched = False  # let the stack close the store normally
