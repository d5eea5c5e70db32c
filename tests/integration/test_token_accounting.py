"""Token accounting over loopback: each relayed request's usage is counted against its
replay outcome (cache on: replayed / nothing to replay; a direct Responses call: fenced;
cache off), shows on /metrics and in the status document, and the hourly tallies in
relay-stats.sqlite survive a restart. Nothing in the database names a conversation."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from relay.ops.token_stats import token_accounting
from relay.storage.stats_db import FILE_NAME
from tests.support.accounting import counting, direct_responses_call
from tests.support.agent_session import MODEL, SYSTEM_PROMPT, TurnUsage, run_session
from tests.support.cache_stack import CACHE_ON
from tests.support.stack import TOKEN, UPSTREAM_KEY, Stack, running_stack

TURNS = 4
METRICS = {"RELAY_METRICS_PORT": "0"}


def scrape(stack: Stack) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    assert stack.relay.ops is not None and stack.relay.ops.metrics_http is not None
    answer = requests.get(
        f"http://127.0.0.1:{stack.relay.ops.metrics_http.port}/metrics", timeout=10
    )
    assert answer.status_code == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(answer.text)
        for s in family.samples
    }


def tokens(kind: str, outcome: str, what: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    labels = {"kind": kind, "model": MODEL, "outcome": outcome, "type": what}
    return "relay_upstream_tokens_total", tuple(sorted(labels.items()))


def report(stack: Stack) -> dict[str, Any]:
    runtime = stack.relay.runtime
    assert runtime is not None
    tokens = token_accounting(runtime)
    assert tokens is not None

    async def read() -> dict[str, Any]:  # on the relay's loop, as relay status reads it
        return tokens.report()

    return stack.loop.run(read())


def test_usage_by_outcome_on_metrics_in_status_and_after_a_restart(tmp_path: Path) -> None:
    with running_stack(tmp_path / "data", {**CACHE_ON, **METRICS}) as stack:
        with counting(stack, TURNS + 1):
            usages = run_session(stack, turns=TURNS)
            direct_responses_call(stack)
        values = scrape(stack)
        replayed: list[TurnUsage] = usages[1:]
        assert values[tokens("chat", "replayed", "input")] == sum(u.prompt_tokens for u in replayed)
        assert values[tokens("chat", "replayed", "cached")] == sum(
            u.cached_tokens for u in replayed
        )
        assert values[tokens("chat", "replayed", "reasoning")] == sum(
            u.reasoning_tokens for u in replayed
        )
        assert values[tokens("chat", "nothing_to_replay", "cached")] == 0
        assert values[tokens("chat", "nothing_to_replay", "input")] == usages[0].prompt_tokens
        labels = (("kind", "chat"), ("model", MODEL), ("outcome", "replayed"))
        # Turn n replays the n-1 earlier turns' blocks: 1 + 2 + 3.
        assert values["relay_replay_outcome_blocks_total", labels] == 6
        fenced = (("kind", "responses"), ("model", MODEL), ("outcome", "bypass_fenced"))
        assert values["relay_replay_outcome_requests_total", fenced] == 1
        assert values["relay_added_time_to_first_byte_seconds_count", ()] == TURNS + 1
        before = report(stack)
        hour = before["lastHour"]
        cached = sum(u.cached_tokens for u in replayed)
        assert hour["withReplay"] == {
            "cached": cached,
            "input": sum(u.prompt_tokens for u in replayed),
            "share": round(cached / sum(u.prompt_tokens for u in replayed), 4),
        }
        assert hour["events"]["fenced"] == {"direct_responses": 1}
        assert hour["requests"] == TURNS + 1
        stack.restart_relay()  # the stop writes what was pending
        after = report(stack)
        assert after["lastHour"] == before["lastHour"]
        assert scrape(stack).get(tokens("chat", "replayed", "input")) is None  # since start
    # Hours, shapes, the model, outcome and reason codes, counts: nothing else.
    conn = sqlite3.connect(tmp_path / "data" / FILE_NAME)
    dump = "\n".join(conn.iterdump())
    conn.close()
    for secret in (TOKEN, UPSTREAM_KEY, SYSTEM_PROMPT[:40], "gAAAAA", "call_turn"):
        assert secret not in dump


def test_cache_off_is_its_own_outcome(tmp_path: Path) -> None:
    with running_stack(tmp_path / "data", METRICS) as stack:
        with counting(stack, 2):
            usages = run_session(stack, turns=2)
        values = scrape(stack)
    assert values[tokens("chat", "cache_off", "input")] == sum(u.prompt_tokens for u in usages)
    assert not [k for k in values if k[0] == "relay_upstream_tokens_total"
                and dict(k[1])["outcome"] != "cache_off"]  # fmt: skip


def test_the_dashboard_is_one_page_that_loads_nothing_else(tmp_path: Path) -> None:
    with running_stack(tmp_path / "data", METRICS) as stack:
        assert stack.relay.ops is not None and stack.relay.ops.metrics_http is not None
        base = f"http://127.0.0.1:{stack.relay.ops.metrics_http.port}"
        page = requests.get(f"{base}/", timeout=10)
        other = requests.get(f"{base}/index.html", timeout=10)
        banner = stack.relay.banner()
    assert page.status_code == 200
    assert page.headers["Content-Type"] == "text/html; charset=utf-8"
    assert page.headers["Content-Security-Policy"].startswith("default-src 'none'")
    assert page.headers["Cache-Control"] == "no-store"
    assert "no traffic yet" in page.text
    assert other.status_code == 404
    assert f"dashboard: {base}/" in banner
