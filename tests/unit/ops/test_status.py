"""relay.ops.status: the ``relay admin status`` document, built from a real runtime (the
replay cache on a real store in a temp dir, a manual clock): what each section reports,
the last-hour window, the store sample's age, and a failing sample reported, not raised."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from relay import __version__
from relay.core.rejection import RejectionKind
from relay.core.token_usage import Usage
from relay.errors import StoreError
from relay.ops.metrics import relay_metrics
from relay.ops.status import cache_state, status_document, tunnel_status
from relay.ops.store_sample import TTL_S
from relay.ops.token_stats import TokenAccounting
from relay.tunnel.supervisor import Tunnel
from tests.support.ops_runtime import OpsRuntime, ops_runtime


def document(ops: OpsRuntime, **kw: Any) -> dict[str, Any]:
    return status_document(
        ops.runtime, ops.sampler, ops.snapshots, offline_fake=kw.pop("offline_fake", False), **kw
    )


@pytest.mark.parametrize(
    ("first", "second", "state"),
    [(True, None, "on"), (False, None, "off"), (True, False, "off (store kept)")],
    ids=["on", "off-no-store", "off-over-a-store"],
)
def test_cache_state_says_whether_a_store_is_kept_while_off(
    tmp_path: Path, first: bool, second: bool | None, state: str
) -> None:
    with ops_runtime(tmp_path, cache=first) as ops:
        if second is None:
            assert cache_state(ops.runtime) == state
            return
    with ops_runtime(tmp_path, cache=second) as ops:
        assert cache_state(ops.runtime) == state
        store = document(ops)["store"]
        assert store is not None and store["fileBytes"] > 0  # the kept store is still sampled


def test_the_relay_section(tmp_path: Path) -> None:
    with ops_runtime(tmp_path) as ops:
        ops.clock.advance(12.5)
        relay = document(ops, metrics_url="http://127.0.0.1:9100/metrics")["relay"]
        assert relay["version"] == __version__
        assert relay["uptimeSeconds"] == 12.5
        assert relay["startedAt"] == ops.clock.wall() - 12.5
        assert relay["now"] == ops.clock.wall()
        assert relay["upstream"] == "https://api.openai.com"  # the origin: no path, no key
        assert relay["cache"] == "on"
        assert relay["shuttingDown"] is False
        assert relay["tunnel"] is None and tunnel_status(ops.runtime) is None
        assert relay["metricsUrl"] == "http://127.0.0.1:9100/metrics"
        ops.runtime.shutting_down = True
        again = document(ops, offline_fake=True)["relay"]
        assert again["upstream"] == "offline fake"
        assert again["shuttingDown"] is True and again["metricsUrl"] is None


def test_replay_totals_and_the_last_hour_window(tmp_path: Path) -> None:
    with ops_runtime(tmp_path) as ops:
        replay = ops.runtime.cache.metrics.replay
        for _ in range(3):
            replay.count("chat", "gpt-5", "dispatched")
        replay.count("chat", "gpt-5", "accepted")
        replay.count_rejected("chat", "gpt-5", RejectionKind.INVALID_ENCRYPTED_CONTENT)
        first = document(ops)["replay"]
        assert (first["dispatched"], first["accepted"]) == (3, 1)
        # The first reading is the window's baseline: nothing has grown over it yet.
        assert first["lastHour"] == {"dispatched": 0, "accepted": 0, "resent": 0,
                                     "windowSeconds": 0.0}  # fmt: skip
        ops.clock.advance(61)
        replay.count("responses", "gpt-5", "dispatched")
        replay.count("responses", "gpt-5", "accepted")
        second = document(ops)["replay"]
        assert (second["dispatched"], second["accepted"]) == (4, 2)
        assert second["lastHour"] == {"dispatched": 1, "accepted": 1, "resent": 0,
                                      "windowSeconds": 61.0}  # fmt: skip
        ops.clock.advance(3600)  # the baseline moves to the sample an hour back
        third = document(ops)["replay"]
        assert third["lastHour"] == {"dispatched": 0, "accepted": 0, "resent": 0,
                                     "windowSeconds": 3600.0}  # fmt: skip


def test_cache_strict_and_error_sections(tmp_path: Path) -> None:
    with ops_runtime(tmp_path) as ops:
        runtime = ops.runtime
        cache = runtime.cache.metrics
        cache.requests = 9
        cache.skipped.update({"not_a_reasoning_model": 2, "capacity_bypass": 3})
        cache.replayed_blocks, cache.fenced = 7, 1
        strict = runtime.strict.metrics
        strict.hits.update({("deepseek", "r1"): 2, ("deepseek", "chat"): 1})
        strict.misses.update({("kimi", "k2"): 4})
        strict.stripped.update({("deepseek", "r1"): 5})
        relay_metrics(runtime).request_finished(
            "/v1/chat/completions", 504, "upstream_timeout", 100.0
        )
        relay_metrics(runtime).request_finished("/v1/chat/completions", 200, None, 101.0)
        doc = document(ops)
        assert doc["cache"]["requests"] == 9
        assert list(doc["cache"]["skipped"]) == ["capacity_bypass", "not_a_reasoning_model"]
        assert doc["cache"]["bypasses"] == 3
        assert (doc["cache"]["replayedBlocks"], doc["cache"]["fenced"]) == (7, 1)
        assert doc["cache"]["activeSessions"] == 0
        budget = runtime.cache.capacity.budget
        assert doc["cache"]["sessionLimit"] == budget.effective_concurrent
        assert doc["cache"]["sessionLimitConfigured"] == budget.max_concurrent
        assert doc["strict"] == {
            "deepseek": {"restored": 3, "missed": 0, "stripped": 5},  # summed over models
            "kimi": {"restored": 0, "missed": 4, "stripped": 0},
        }
        assert list(doc["strict"]) == ["deepseek", "kimi"]
        assert doc["errors"]["byReason"] == {"upstream_timeout": 1}
        assert doc["errors"]["latest"][0]["code"] == "upstream_timeout"
        routes = doc["requests"]
        assert sum(sum(outcomes.values()) for outcomes in routes.values()) == 2
        assert doc["snapshot"] == {"running": False, "progress": None, "last": None}


def test_the_store_sample_and_its_age(tmp_path: Path) -> None:
    with ops_runtime(tmp_path) as ops:
        store = document(ops)["store"]
        assert store["sampledAt"] == ops.clock.wall()
        assert store["sampleAgeSeconds"] == 0 and store["cachedForSeconds"] == TTL_S
        ops.clock.advance(TTL_S / 2)
        later = document(ops)["store"]
        assert later["sampledAt"] == store["sampledAt"]  # the same sample, older
        assert later["sampleAgeSeconds"] == round(TTL_S / 2, 3)
        assert ops.sampler.reads == 1


def test_no_store_no_sample(tmp_path: Path) -> None:
    with ops_runtime(tmp_path, cache=False) as ops:
        assert document(ops)["store"] is None


def test_a_failing_store_sample_is_reported_in_the_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ops_runtime(tmp_path) as ops:

        def broken() -> None:
            raise StoreError("the replay store failed: disk I/O error", sqlite_error="SQLITE_IOERR")

        monkeypatch.setattr(ops.sampler, "sample", broken)
        doc = document(ops)
        assert doc["ok"] is True
        assert doc["store"] == {"error": "the replay store failed: disk I/O error"}


def test_the_tunnel_s_state_program_and_url(tmp_path: Path) -> None:
    command = f"{sys.executable} -c pass {{port}}"
    with ops_runtime(tmp_path, cache=False, RELAY_TUNNEL_CMD=command) as ops:
        runtime = ops.runtime
        configured = runtime.config.tunnel_command
        assert configured is not None
        program = Path(sys.executable).name  # the program's name only, never its directory
        assert document(ops)["relay"]["tunnel"] == {"state": "starting", "url": None,
                                                    "program": program}  # fmt: skip
        tunnel = Tunnel(configured, clock=ops.clock, port=1, local_url="http://127.0.0.1:1",
                        token_hint="", env={})  # fmt: skip
        runtime.tunnel = tunnel
        assert tunnel_status(runtime) == {"state": "starting", "url": None, "program": program}
        tunnel.url = "https://relay-test.trycloudflare.com"
        assert document(ops)["relay"]["tunnel"] == {
            "state": "up", "url": "https://relay-test.trycloudflare.com", "program": program,
        }  # fmt: skip


def test_what_replay_buys_is_the_token_accounting_report(tmp_path: Path) -> None:
    with ops_runtime(tmp_path) as ops:
        assert document(ops)["replayBuys"] is None  # before relay.ops opened it
        tokens = ops.runtime.tokens = TokenAccounting(ops.clock, None, retention_days=0)
        tokens.answered("chat", "gpt-5", "replayed=1", Usage(100, 80))
        buys = document(ops)["replayBuys"]
        assert buys == tokens.report()
        assert buys["lastHour"]["withReplay"] == {"cached": 80, "input": 100, "share": 0.8}
