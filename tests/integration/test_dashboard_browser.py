"""The dashboard in a real browser: headless Chromium (tests/support/browser.py) loads
``GET /`` from the metrics listener of a relay that has relayed a Cursor-like session (cache
on, loopback fake upstream) and one direct Responses call, and the rendered DOM shows the
charts with their numbers and no ciphertext or credential; an empty relay says "no traffic
yet". Screenshots are kept in test-artifacts/ (the path is printed)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.support.accounting import counting, direct_responses_call
from tests.support.agent_session import run_session
from tests.support.browser import dump_dom, find_chromium, screenshot
from tests.support.cache_stack import CACHE_ON
from tests.support.log_leaks import CIPHERTEXT
from tests.support.stack import TOKEN, UPSTREAM_KEY, Stack, running_stack

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (nox installs Debian's 'chromium' package as root; "
    "otherwise: apt-get install --no-install-recommends chromium)",
)
TURNS = 6
METRICS = {"RELAY_METRICS_PORT": "0"}


class Bars(HTMLParser):
    """Every SVG rect's attributes, by class."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.rects: list[dict[str, str]] = []
        self.ids: set[str] = set()
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if "id" in values:
            self.ids.add(values["id"])
        if tag == "rect":
            self.rects.append(values)

    def of(self, cls: str) -> list[dict[str, str]]:
        return [r for r in self.rects if cls in r.get("class", "").split()]


def dashboard_url(stack: Stack) -> str:
    assert stack.relay.ops is not None and stack.relay.ops.metrics_http is not None
    return f"http://127.0.0.1:{stack.relay.ops.metrics_http.port}/"


def test_the_dashboard_shows_what_replay_bought(tmp_path: Path) -> None:
    assert CHROMIUM is not None
    with running_stack(tmp_path / "data", {**CACHE_ON, **METRICS}) as stack:
        with counting(stack, TURNS + 1):
            usages = run_session(stack, turns=TURNS)
            direct_responses_call(stack)
        url = dashboard_url(stack)
        dom = dump_dom(CHROMIUM, url)
        shot = screenshot(CHROMIUM, url, "dashboard.png")
    print(f"\ndashboard screenshot: {shot}")
    bars = Bars(dom)
    assert {"outcomes-chart", "share-chart", "tokens-table", "reasons-chart",
            "latency-chart", "live-sessions", "store-table"} <= bars.ids  # fmt: skip
    assert "no traffic yet" not in dom
    # Every turn after the first replayed the earlier turns' reasoning.
    outcomes = {r["class"]: int(r["data-count"]) for r in bars.rects if "data-count" in r
                and r["class"].startswith("bar outcome-")}  # fmt: skip
    assert outcomes == {
        "bar outcome-replayed": TURNS - 1,
        "bar outcome-nothing_to_replay": 1,
        "bar outcome-bypass_fenced": 1,
    }
    # The cached share with replay, as the client's own usage says it was.
    prompt = sum(u.prompt_tokens for u in usages[1:])
    cached = sum(u.cached_tokens for u in usages[1:])
    [day] = [r for r in bars.of("share-withReplay") if r["data-window"] == "lastDay"]
    assert float(day["data-share"]) == pytest.approx(cached / prompt, abs=1e-4)
    assert 0 < float(day["data-share"]) < 1
    reasons = {r["data-reason"]: r["data-count"] for r in bars.rects if "data-reason" in r}
    assert reasons.get("direct_responses") == "1"
    latency = [r for r in bars.of("latency-p95") if r["data-window"] == "lastHour"]
    assert latency and int(latency[0]["data-ms"]) > 0
    assert re.search(r'id="live-sessions">0<', dom)
    # No ciphertext, relay token or upstream key anywhere on the page.
    assert not CIPHERTEXT.search(dom)
    assert TOKEN not in dom and UPSTREAM_KEY not in dom
    assert shot.stat().st_size > 10_000


def test_an_empty_relay_says_no_traffic_yet(tmp_path: Path) -> None:
    assert CHROMIUM is not None
    with running_stack(tmp_path / "data", METRICS) as stack:
        url = dashboard_url(stack)
        dom = dump_dom(CHROMIUM, url)
        shot = screenshot(CHROMIUM, url, "dashboard-empty.png")
    print(f"\nempty dashboard screenshot: {shot}")
    assert "no traffic yet" in dom
    assert 'id="outcomes-chart"' not in dom
    assert re.search(r'id="cache-state">off<', dom)
