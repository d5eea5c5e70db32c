"""``relay status``'s table (relay.ops.status_view)."""

from __future__ import annotations

from typing import Any

import pytest

from relay.clock import ManualClock
from relay.core.token_usage import Price, Usage
from relay.ops.status_view import duration, render, size
from relay.ops.token_stats import TokenAccounting

NOW = 1_767_225_600.0


def doc(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "relay": {"uptimeSeconds": 7384.2, "version": "0.1.0", "upstream": "https://api.openai.com",
                  "cache": "on", "now": NOW},
        "replay": {"dispatched": 40, "accepted": 30, "rejected": 2, "resent": 2,
                   "rejectedByReason": {"encrypted_content_invalid": 2},
                   "lastHour": {"dispatched": 10, "accepted": 9, "resent": 0,
                                "windowSeconds": 3600.0}},
        "cache": {"activeSessions": 1, "sessionLimit": 10, "bypasses": 3},
        "errors": {"latest": [{"code": "upstream_timeout", "count": 4, "lastAt": NOW - 60}]},
        "store": {"fileBytes": 3 * 1024 * 1024, "walBytes": 4096,
                  "counts": {"payloads": {"value": 100000, "exact": False}},
                  "payloadBytes": {"value": 2048, "exact": True},
                  "oldestPayloadTouchedAt": NOW - 3 * 86400 - 7200},
        "snapshot": {"running": False, "progress": None, "last": None},
    }  # fmt: skip
    base.update(overrides)
    return base


def test_plain_table_says_everything_asked_for() -> None:
    text = render(doc(), colour=False)
    assert "\033[" not in text
    lines: dict[str, str] = {}
    for line in text.splitlines():
        label, value = line.split(None, 1)
        lines[label] = value
    assert lines["uptime"].startswith("2h 03m")
    assert lines["upstream"].strip() == "https://api.openai.com"
    assert lines["cache"].strip() == "on"
    assert "last hour: 9/10 accepted (90%)" in lines["replay"]
    assert "since start: 30/40 accepted (75%)" in lines["replay"]
    assert "encrypted_content_invalid 2" in lines["rejected"]
    assert "upstream_timeout x4 (last 23:59:00Z)" in text
    assert "3.0 MiB (WAL 4.0 KiB), >= 100000 payloads, 2.0 KiB, oldest touched 3d 2h ago" in text


def test_colour_only_when_asked() -> None:
    assert "\033[32m" in render(doc(), colour=True)


def test_young_process_and_empty_store() -> None:
    young = doc(
        relay={**doc()["relay"], "uptimeSeconds": 75},
        replay={"dispatched": 0, "accepted": 0, "rejected": 0, "resent": 0,
                "rejectedByReason": {}, "lastHour": {"dispatched": 0, "accepted": 0,
                                                     "windowSeconds": 75.0}},
        errors={"latest": []}, store=None,
    )  # fmt: skip
    text = render(young, colour=False)
    assert "last 1m 15s: none dispatched; since start: none dispatched" in text
    assert "rejected" not in text and "last errors  none" in text
    assert "none (the cache has never been enabled)" in text


def test_snapshot_progress_and_store_error() -> None:
    running = doc(snapshot={"running": True, "progress": {"copiedPages": 64, "totalPages": 100},
                            "last": None}, store={"error": "reasoning cache x is closed"})  # fmt: skip
    text = render(running, colour=False)
    assert "copying 64/100 pages" in text and "unreadable: reasoning cache x is closed" in text


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (59.9, "59s"), (60, "1m 00s"), (3600, "1h 00m"), (86400 * 2 + 3600, "2d 1h"),
    (-5, "0s"),
])  # fmt: skip
def test_duration(seconds: float, text: str) -> None:
    assert duration(seconds) == text


@pytest.mark.parametrize(("n", "text"), [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (5 * 1024**3, "5.0 GiB"),
    (3 * 1024**4, "3072.0 GiB"),
])  # fmt: skip
def test_size(n: int, text: str) -> None:
    assert size(n) == text


def test_tunnel_strict_providers_and_metrics_url_rows() -> None:
    relay = {**doc()["relay"], "metricsUrl": "http://127.0.0.1:9464/metrics",
             "tunnel": {"state": "up", "url": "https://a.trycloudflare.com",
                        "program": "cloudflared"}}  # fmt: skip
    strict = {"deepseek": {"restored": 5, "missed": 1, "stripped": 0}}
    rows = [line.split(None, 1) for line in render(doc(relay=relay, strict=strict),
                                                   colour=False).splitlines()]  # fmt: skip
    values = {label: value.strip() for label, value in rows}
    assert values["tunnel"] == "up https://a.trycloudflare.com (cloudflared)"
    assert values["strict"] == "deepseek: 5 restored, 1 missed, 0 stripped"
    assert values["metrics"] == "http://127.0.0.1:9464/metrics"
    starting = {**relay, "tunnel": {"state": "exited", "url": None, "program": "ngrok"}}
    assert "exited (ngrok)" in render(doc(relay=starting), colour=False)


def test_no_tunnel_no_metrics_no_rows() -> None:
    labels = {line.split(None, 1)[0] for line in render(doc(), colour=False).splitlines()}
    assert not labels & {"tunnel", "strict", "metrics", "shared"}


@pytest.mark.parametrize(
    ("live", "lapses", "line"),
    [
        ([{"id": "inst_a", "leaseExpiresInSeconds": 24.04}, {"id": "inst_b",
          "leaseExpiresInSeconds": 3.0}], 0,
         "postgresql://relay@db/cache: 2 live relays (this relay inst_a lease 24.0s)"),
        ([{"id": "inst_b", "leaseExpiresInSeconds": 3.0}], 1,
         "postgresql://relay@db/cache: 1 live relays (this relay inst_a holds no live lease, "
         "1 lapses)"),
        (None, 0, "postgresql://relay@db/cache: leases unreadable (the database cannot be "
         "reached)"),
    ],
)  # fmt: skip
def test_the_shared_store_row(live: list[dict[str, Any]] | None, lapses: int, line: str) -> None:
    shared = {"database": "postgresql://relay@db/cache", "instance": "inst_a",
              "liveInstances": live, "leaseLapses": lapses}  # fmt: skip
    rows = render(doc(relay={**doc()["relay"], "shared": shared}), colour=False).splitlines()
    assert [row.split(None, 1)[1].strip() for row in rows if row.startswith("shared")] == [line]


@pytest.mark.parametrize(
    ("fenced", "line"),
    [
        ({"count": 37, "windowSeconds": 3600.0,
          "reasons": [{"code": "item_type_reasoning", "count": 37,
                       "text": "input item type 'reasoning'"}]},
         "replay fenced 37 times in the last hour: input item type 'reasoning'"),
        ({"count": 1, "windowSeconds": 75.0,
          "reasons": [{"code": "direct_responses", "count": 1,
                       "text": "direct /v1/responses traffic"}]},
         "replay fenced once in the last 1m 15s: direct /v1/responses traffic"),
        ({"count": 5, "windowSeconds": 3600.0,
          "reasons": [{"code": "item_type_unknown", "count": 3,
                       "text": "an input item of an unknown type"},
                      {"code": "message_role", "count": 2,
                       "text": "a message item with an unknown role"}]},
         "replay fenced 5 times in the last hour: an input item of an unknown type 3, "
         "a message item with an unknown role 2"),
    ],
)  # fmt: skip
def test_fences_of_the_last_hour_say_why(fenced: dict[str, Any], line: str) -> None:
    text = render(doc(cache={**doc()["cache"], "fencedLastHour": fenced}), colour=False)
    assert f"fenced       {line}" in text
    quiet = {"count": 0, "windowSeconds": 3600.0, "reasons": []}
    assert "fenced" not in render(doc(cache={**doc()["cache"], "fencedLastHour": quiet}),
                                  colour=False)  # fmt: skip


def accounting(prices: dict[str, Price] | None = None) -> TokenAccounting:
    clock = ManualClock(wall=NOW)
    events = {("fenced", "direct_responses"): 2, ("rejected", "encrypted_content_invalid"): 1}
    stats = TokenAccounting(clock, None, retention_days=0, counters=lambda: events,
                            prices=prices)  # fmt: skip
    stats.answered("chat", "gpt-5", "replayed=2", Usage(4000, 3000, 0, 500, 1200))
    stats.answered("chat", "gpt-5", "none; reason=nothing_to_replay", Usage(4000, 1000, 0, 10, 5))
    stats.added_latency(0.0015)
    stats.flush_now()  # the counters' growth lands in this hour
    clock.advance(2 * 3600)
    stats.answered("chat", "gpt-5", "off", Usage(2000, 0, 0, 20, 10))
    return stats


def test_what_replay_buys_has_a_column_per_window() -> None:
    text = render(doc(replayBuys=accounting().report()), colour=False)
    section = text[text.index("what replay buys") :]
    rows = {line[:22].strip(): line[22:].split("  ") for line in section.splitlines()}
    header = [c.strip() for c in rows["what replay buys"] if c.strip()]
    assert header == ["last hour", "last day", "last 30 days"]
    cells = {k: [c.strip() for c in v if c.strip()] for k, v in rows.items()}
    assert cells["requests replayed"] == ["0 of 1", "1 of 3", "1 of 3"]
    assert cells["cached input, replay"] == ["-", "75.0% of 4.0k", "75.0% of 4.0k"]
    assert cells["cached input, none"] == ["0.0% of 2.0k", "16.7% of 6.0k", "16.7% of 6.0k"]
    assert cells["reasoning tokens"] == ["10", "1.2k", "1.2k"]
    assert cells["added TTFB p50 / p95"] == ["-", "2 / 2 ms", "2 / 2 ms"]
    assert "est. saving" not in cells
    assert "declined" not in section  # the plan's own reasons stay in the dashboard
    assert "fenced (30 days)  direct_responses 2" in section
    assert "rejected (30 days)  encrypted_content_invalid 1" in section


def test_prices_add_an_estimated_saving() -> None:
    # per million: absurd prices, so that the figures show at two decimals
    prices = {"gpt-5": Price(input=2000.0, cached_input=500.0, output=0.0)}
    text = render(doc(replayBuys=accounting(prices).report()), colour=False)
    [line] = [line for line in text.splitlines() if line.startswith("est. saving")]
    # hour: the cache-off answer only, 2000 uncached = 4.00. Day: that, plus 1000
    # uncached + 3000 cached (replay) and 3000 uncached + 1000 cached: 14.00 in all; replay's
    # extra cached tokens over the 1/6 share without it, 2333.3, at 1500 per million: 3.50.
    cells = [c.strip() for c in line[len("est. saving") :].split("  ") if c.strip()]
    assert cells == ["0.00 of 4.00 spent", "3.50 of 14.00 spent", "3.50 of 14.00 spent"]


def test_no_traffic_yet() -> None:
    empty = TokenAccounting(ManualClock(wall=NOW), None, retention_days=0).report()
    assert render(doc(replayBuys=empty), colour=False).endswith("what replay buys  no traffic yet")
    assert "what replay buys" not in render(doc(), colour=False)


def test_no_reason_rows_without_rejections_or_fences() -> None:
    stats = TokenAccounting(ManualClock(wall=NOW), None, retention_days=0)
    stats.answered("chat", "gpt-5", "replayed=1", Usage(100, 50))
    text = render(doc(replayBuys=stats.report()), colour=False)
    assert "requests replayed" in text
    assert "rejected (30 days)" not in text and "fenced (30 days)" not in text
