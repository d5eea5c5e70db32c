"""relay.ops.dashboard: the page rendered from a real runtime's status document and token
accounting (manual clock): charts with their numbers, "no traffic yet" for an empty relay,
every text escaped, and nothing that loads from anywhere."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from relay.core.token_usage import HOUR_S, HourDelta, Key, Tally, Usage, hour_of
from relay.ops.dashboard import Snapshot, hours_of, render
from relay.ops.status import status_document
from relay.ops.token_stats import TokenAccounting, token_accounting
from tests.support.ops_runtime import OpsRuntime, ops_runtime


class Elements(HTMLParser):
    """Every start tag with its attributes, in order."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def with_class(self, name: str) -> list[dict[str, str | None]]:
        return [a for _, a in self.tags if name in (a.get("class") or "").split()]


def page(ops: OpsRuntime, **status: Any) -> str:
    doc = status_document(ops.runtime, ops.sampler, ops.snapshots, offline_fake=False)
    doc["relay"].update(status)
    tokens = token_accounting(ops.runtime)
    delta = tokens.recent(24) if tokens is not None else HourDelta()
    return render(Snapshot(doc, hours_of(delta, hour_of(ops.clock.wall()))))


def assert_self_contained(html: str) -> None:
    elements = Elements(html)
    assert not [t for t, _ in elements.tags if t in ("script", "link", "img", "iframe", "object")]
    for _, attrs in elements.tags:
        for name in ("src", "href", "action"):
            assert name not in attrs
    assert "url(" not in html and "@import" not in html
    assert '<meta http-equiv="refresh" content="15">' in html


def test_an_empty_relay_says_no_traffic_yet(tmp_path: Path) -> None:
    with ops_runtime(tmp_path) as ops:
        ops.runtime.tokens = TokenAccounting(ops.clock, None, retention_days=0)
        html = page(ops)
    assert "no traffic yet" in html
    assert 'id="outcomes-chart"' not in html
    assert 'id="live-sessions">0<' in html
    assert_self_contained(html)


def test_traffic_fills_every_chart(tmp_path: Path) -> None:
    with ops_runtime(tmp_path) as ops:
        events = {("fenced", "direct_responses"): 3, ("rejected", "encrypted_content_invalid"): 1}
        tokens = ops.runtime.tokens = TokenAccounting(
            ops.clock, None, retention_days=0, counters=lambda: events
        )
        tokens.answered("chat", "gpt-5", "none; reason=nothing_to_replay", Usage(4000, 1000))
        tokens.flush_now()
        ops.clock.advance(HOUR_S)
        for _ in range(2):
            tokens.answered("chat", "gpt-5", "replayed=2", Usage(4000, 3000, 0, 100, 60))
        tokens.answered("responses", "gpt-5", "none; reason=responses_passthrough", None)
        tokens.added_latency(0.003)
        tokens.added_latency(0.012)
        html = page(ops)
    assert_self_contained(html)
    elements = Elements(html)
    replayed = elements.with_class("outcome-replayed")
    assert [a["data-count"] for a in replayed] == ["2"]
    assert [a["data-count"] for a in elements.with_class("outcome-nothing_to_replay")] == ["1"]
    assert [a["data-count"] for a in elements.with_class("outcome-bypass_fenced")] == ["1"]
    shares = {(a["data-window"], a["class"]): a["data-share"]
              for a in elements.with_class("bar") if a.get("data-share") is not None}  # fmt: skip
    assert shares["lastHour", "bar share-withReplay"] == "0.75"
    assert shares["lastHour", "bar share-withoutReplay"] == ""  # no such answer this hour
    assert shares["lastDay", "bar share-withoutReplay"] == "0.25"
    reasons = {a["data-reason"]: a["data-count"] for a in elements.with_class("bar")
               if a.get("data-reason")}  # fmt: skip
    assert reasons == {"direct_responses": "3", "encrypted_content_invalid": "1"}
    hourly = {(a["class"], a["data-hour"]): a["data-share"]
              for a in elements.with_class("point")}  # fmt: skip
    now_hour = str(hour_of(ops.clock.wall()))
    earlier = str(hour_of(ops.clock.wall()) - HOUR_S)
    assert hourly == {
        ("point share-with", now_hour): "0.7500",
        ("point share-without", earlier): "0.2500",
    }
    latency = {a["data-window"]: a["data-ms"] for a in elements.with_class("latency-p95")}
    assert latency == {"lastHour": "15", "lastDay": "15", "last30Days": "15"}
    assert "no traffic yet" not in html
    assert re.search(r'<td class="n">8\.0k</td>', html)  # input tokens of the hour


def test_text_is_escaped(tmp_path: Path) -> None:
    with ops_runtime(tmp_path) as ops:
        ops.runtime.tokens = TokenAccounting(ops.clock, None, retention_days=0)
        html = page(ops, upstream='<script>alert("x")</script>', version="1&2")
    assert "<script>" not in html
    assert "&lt;script&gt;" in html and "1&amp;2" in html


def test_hours_are_a_gapless_day() -> None:
    delta = HourDelta()
    delta.tallies.add(Key(10 * HOUR_S, "chat", "m", "replayed"), Tally(requests=4))
    points = hours_of(delta, 30 * HOUR_S)
    assert [p.hour for p in points] == [h * HOUR_S for h in range(7, 31)]
    assert [p.outcomes for p in points if p.outcomes] == [{"replayed": 4}]
