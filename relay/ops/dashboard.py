"""``GET /`` on the metrics listener: one server-rendered page (pure: a snapshot in, HTML
out).

Inline SVG charts, inline CSS, a meta refresh; no script, no font, no image, no link to
anything off the machine. What it shows comes from the status document
(relay.ops.status) and the token accounting's hours (relay.ops.token_stats): counts,
shares, reason codes, sizes and times -- never content, ciphertext, ids or credentials.
Every text is escaped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from typing import Any, Final

from relay.core.token_usage import HOUR_S, HourDelta, Key, Outcome, Share, Tally, summarize
from relay.ops.status_view import duration, size, tokens

REFRESH_S: Final = 15
# One colour per outcome, replay first; "other" last.
OUTCOME_COLOURS: Final[Mapping[str, str]] = {
    Outcome.REPLAYED: "#2e7d32",
    Outcome.NOTHING: "#9ccc65",
    Outcome.RESENT: "#ef6c00",
    Outcome.CAPACITY: "#c62828",
    Outcome.LIMIT: "#8e24aa",
    Outcome.FENCED: "#1565c0",
    Outcome.UNDERIVABLE: "#6d4c41",
    Outcome.NOT_REASONING: "#90a4ae",
    Outcome.CACHE_OFF: "#546e7a",
    Outcome.OTHER: "#bdbdbd",
}
WINDOWS: Final = (("lastHour", "last hour"), ("lastDay", "last day"), ("last30Days", "30 days"))


@dataclass(frozen=True)
class HourPoint:
    hour: int  # wall seconds at the start of the hour
    outcomes: Mapping[str, int]  # requests by outcome
    with_replay: Share
    without_replay: Share


@dataclass(frozen=True)
class Snapshot:
    status: Mapping[str, Any]  # relay.ops.status.status_document
    hours: Sequence[HourPoint]  # oldest first, one per hour of the last day
    retention: Mapping[str, Any] | None = None  # RetentionCleanup.to_json (cache on)
    stats_bytes: int | None = None  # the diagnostics database's size
    refresh_s: int = REFRESH_S


def render(snap: Snapshot) -> str:
    status = snap.status
    relay = status["relay"]
    buys = status.get("replayBuys")
    traffic = buys is not None and any(
        buys[key]["requests"] or buys[key]["events"] for key, _ in WINDOWS
    )
    sections = [_header(relay)]
    if traffic:
        assert buys is not None
        sections += [
            _panel("Replay outcomes per hour (last 24 hours)", _outcomes_chart(snap.hours)),
            _panel(
                "Input tokens served from the prompt cache",
                _share_chart(buys) + _hourly_shares(snap.hours),
            ),
            _panel("Tokens", _tokens_table(buys)),
            _panel("Rejections and fences by reason (30 days)", _reasons(buys["last30Days"])),
            _panel("Time the relay adds to the first byte", _latency_chart(buys)),
        ]
    else:
        sections.append(
            '<section class="panel" id="no-traffic"><h2>No traffic yet</h2><p>no traffic yet: '
            "nothing has been relayed in the last 30 days. Send a request through the relay "
            "and this page fills in.</p></section>"
        )
    sections += [
        _panel("Live sessions", _sessions(status["cache"])),
        _panel("Store and retention", _store(status.get("store"), snap, relay["now"])),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="{int(snap.refresh_s)}">'
        "<title>relay: what replay buys</title>"
        f"<style>{_CSS}</style></head><body>" + "".join(sections) + "</body></html>\n"
    )


_CSS: Final = (
    "body{font:14px system-ui,sans-serif;margin:24px;color:#222;background:#fafafa}"
    "h1{font-size:20px;margin:0 0 4px}h2{font-size:15px;margin:0 0 8px}"
    ".panel{background:#fff;border:1px solid #ddd;border-radius:6px;padding:12px 16px;"
    "margin:0 0 16px}.meta{color:#666}table{border-collapse:collapse}"
    "td,th{padding:2px 12px 2px 0;text-align:left}td.n{text-align:right;"
    "font-variant-numeric:tabular-nums}.legend span{display:inline-block;margin-right:12px}"
    ".swatch{display:inline-block;width:10px;height:10px;margin-right:4px}"
    "svg text{font:11px system-ui,sans-serif;fill:#444}"
)


def _panel(title: str, body: str) -> str:
    slug = "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-")[:40]
    return f'<section class="panel" id="{slug}"><h2>{escape(title)}</h2>{body}</section>'


def _header(relay: Mapping[str, Any]) -> str:
    now = datetime.fromtimestamp(relay["now"], UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    return (
        f"<h1>Reasoning replay relay {escape(str(relay['version']))}</h1>"
        f'<p class="meta">cache <b id="cache-state">{escape(str(relay["cache"]))}</b> · '
        f"up {escape(duration(relay['uptimeSeconds']))} · upstream "
        f"{escape(str(relay['upstream']))} · {escape(now)}</p>"
    )


def _pct(ratio: float | None) -> str:
    return "-" if ratio is None else f"{100 * ratio:.1f}%"


def _legend(items: Sequence[tuple[str, str]]) -> str:
    spans = "".join(
        f'<span><i class="swatch" style="background:{colour}"></i>{escape(label)}</span>'
        for label, colour in items
    )
    return f'<p class="legend">{spans}</p>'


def _outcomes_chart(hours: Sequence[HourPoint]) -> str:
    width, height, pad = 720, 160, 24
    top = max((sum(p.outcomes.values()) for p in hours), default=0) or 1
    slot = (width - pad) / max(len(hours), 1)
    bars: list[str] = []
    seen: set[str] = set()
    for i, point in enumerate(hours):
        x = pad + i * slot
        y = float(height - pad)
        for outcome, colour in OUTCOME_COLOURS.items():
            n = point.outcomes.get(outcome, 0)
            if n <= 0:
                continue
            seen.add(outcome)
            h = (height - 2 * pad) * n / top
            y -= h
            label = f"{_hour(point.hour)}: {outcome} {n}"
            bars.append(
                f'<rect class="bar outcome-{outcome}" data-count="{n}" x="{x + 1:.1f}" '
                f'y="{y:.1f}" width="{max(slot - 2, 1):.1f}" height="{h:.1f}" '
                f'fill="{colour}"><title>{escape(label)}</title></rect>'
            )
        if i % 6 == 0:
            bars.append(f'<text x="{x:.1f}" y="{height - 6}">{escape(_hour(point.hour))}</text>')
    bars.append(f'<text x="0" y="{pad - 8}">{top}</text>')
    legend = _legend([(o, c) for o, c in OUTCOME_COLOURS.items() if o in seen])
    return (
        f'<svg id="outcomes-chart" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}"><line x1="{pad}" y1="{height - pad}" x2="{width}" '
        f'y2="{height - pad}" stroke="#999"/>{"".join(bars)}</svg>{legend}'
    )


def _hour(hour: int) -> str:
    return datetime.fromtimestamp(hour, UTC).strftime("%H:00")


def _share_chart(buys: Mapping[str, Any]) -> str:
    width, height, pad = 480, 170, 24
    group = (width - pad) / len(WINDOWS)
    parts: list[str] = []
    for i, (key, title) in enumerate(WINDOWS):
        window = buys[key]
        x0 = pad + i * group
        for j, (name, colour) in enumerate(
            (("withReplay", "#2e7d32"), ("withoutReplay", "#90a4ae"))
        ):
            share = window[name]["share"]
            h = (height - 2 * pad) * (share or 0.0)
            x = x0 + 8 + j * (group / 2 - 8)
            parts.append(
                f'<rect class="bar share-{name}" data-window="{key}" '
                f'data-share="{"" if share is None else share}" x="{x:.1f}" '
                f'y="{height - pad - h:.1f}" width="{group / 2 - 16:.1f}" height="{h:.1f}" '
                f'fill="{colour}"><title>{escape(title)}: {_pct(share)}</title></rect>'
                f'<text class="value" x="{x:.1f}" y="{height - pad - h - 4:.1f}">'
                f"{_pct(share)}</text>"
            )
        parts.append(f'<text x="{x0 + 8:.1f}" y="{height - 6}">{escape(title)}</text>')
    legend = _legend([("with replay", "#2e7d32"), ("without replay", "#90a4ae")])
    return (
        f'<svg id="share-chart" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">{"".join(parts)}</svg>{legend}'
    )


def _hourly_shares(hours: Sequence[HourPoint]) -> str:
    """The cached share per hour, with and without replay: a point per hour that had such
    answers, joined by a line."""
    width, height, pad = 720, 120, 24
    slot = (width - pad) / max(len(hours), 1)
    parts = [f'<line x1="{pad}" y1="{height - pad}" x2="{width}" y2="{height - pad}" '
             'stroke="#999"/>', f'<text x="0" y="{pad - 6}">100%</text>']  # fmt: skip
    for name, colour in (("with", "#2e7d32"), ("without", "#90a4ae")):
        points = []
        for i, point in enumerate(hours):
            share = (point.with_replay if name == "with" else point.without_replay).ratio
            if share is None:
                continue
            x, y = pad + (i + 0.5) * slot, height - pad - (height - 2 * pad) * share
            points.append(f"{x:.1f},{y:.1f}")
            parts.append(
                f'<circle class="point share-{name}" data-hour="{point.hour}" '
                f'data-share="{share:.4f}" cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}">'
                f"<title>{escape(_hour(point.hour))}: {_pct(share)}</title></circle>"
            )
        if len(points) > 1:
            parts.append(
                f'<polyline points="{" ".join(points)}" fill="none" stroke="{colour}" '
                'stroke-width="1.5"/>'
            )
    return (
        f'<svg id="hourly-share-chart" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">{"".join(parts)}</svg>'
        '<p class="meta">per hour, last 24 hours</p>'
    )


def _tokens_table(buys: Mapping[str, Any]) -> str:
    rows: list[tuple[str, str, Callable[[int], str]]] = [
        ("requests", "requests", str),
        ("input", "inputTokens", tokens),
        ("cached input", "cachedTokens", tokens),
        ("cache writes", "cacheWriteTokens", tokens),
        ("output", "outputTokens", tokens),
        ("reasoning", "reasoningTokens", tokens),
        ("replayed blocks", "replayedBlocks", str),
    ]
    head = "".join(f"<th>{escape(title)}</th>" for _, title in WINDOWS)
    body = "".join(
        f"<tr><td>{escape(label)}</td>"
        + "".join(f'<td class="n">{escape(fmt(buys[key][field]))}</td>' for key, _ in WINDOWS)
        + "</tr>"
        for label, field, fmt in rows
    )
    estimates = [buys[key].get("estimate") for key, _ in WINDOWS]
    if all(e is not None for e in estimates):
        body += (
            "<tr><td>estimated saving (of spend)</td>"
            + "".join(
                f'<td class="n">{e["saving"]:.2f} (of {e["cost"]:.2f})</td>'
                for e in estimates
                if e is not None
            )
            + "</tr>"
        )
    return f'<table id="tokens-table"><tr><th></th>{head}</tr>{body}</table>'


def _reasons(window: Mapping[str, Any]) -> str:
    events: Mapping[str, Mapping[str, int]] = window["events"]
    rows = [(kind, reason, n) for kind in ("rejected", "fenced", "declined")
            for reason, n in events.get(kind, {}).items() if n > 0]  # fmt: skip
    if not rows:
        return '<p id="reasons-none">none: no replay was refused, fenced or declined.</p>'
    top = max(n for _, _, n in rows)
    bar_w, row_h = 360, 20
    colours = {"rejected": "#ef6c00", "fenced": "#1565c0", "declined": "#9e9e9e"}
    parts = []
    for i, (kind, reason, n) in enumerate(sorted(rows, key=lambda r: (-r[2], r[0], r[1]))):
        w = bar_w * n / top
        y = i * row_h
        parts.append(
            f'<rect class="bar reason-{kind}" data-reason="{escape(reason)}" data-count="{n}" '
            f'x="260" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" fill="{colours[kind]}"/>'
            f'<text x="0" y="{y + 14}">{escape(kind)}: {escape(reason)}</text>'
            f'<text x="{264 + w:.1f}" y="{y + 14}">{n}</text>'
        )
    height = row_h * len(rows)
    return (
        f'<svg id="reasons-chart" role="img" width="680" height="{height}" '
        f'viewBox="0 0 680 {height}">{"".join(parts)}</svg>'
    )


def _latency_chart(buys: Mapping[str, Any]) -> str:
    width, height, pad = 480, 150, 24
    values = [(key, title, buys[key]["addedLatency"]) for key, title in WINDOWS]
    top = max((v["p95Ms"] or 0 for _, _, v in values), default=0) or 1
    group = (width - pad) / len(values)
    parts = []
    for i, (key, title, v) in enumerate(values):
        x0 = pad + i * group
        for j, (name, colour) in enumerate((("p50Ms", "#42a5f5"), ("p95Ms", "#1565c0"))):
            ms = v[name]
            h = (height - 2 * pad) * (ms or 0) / top
            x = x0 + 8 + j * (group / 2 - 8)
            shown = "-" if ms is None else f"≤{ms} ms"
            parts.append(
                f'<rect class="bar latency-{name[:3]}" data-window="{key}" '
                f'data-ms="{"" if ms is None else ms}" x="{x:.1f}" y="{height - pad - h:.1f}" '
                f'width="{group / 2 - 16:.1f}" height="{h:.1f}" fill="{colour}"/>'
                f'<text x="{x:.1f}" y="{height - pad - h - 4:.1f}">{escape(shown)}</text>'
            )
        parts.append(
            f'<text x="{x0 + 8:.1f}" y="{height - 6}">{escape(title)} ({v["count"]})</text>'
        )
    legend = _legend([("p50", "#42a5f5"), ("p95", "#1565c0")])
    return (
        f'<svg id="latency-chart" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">{"".join(parts)}</svg>{legend}'
        '<p class="meta">arrival to first byte, less the wait for the upstream\'s first '
        "event; bucket upper bounds</p>"
    )


def _sessions(cache: Mapping[str, Any]) -> str:
    active, limit = cache.get("activeSessions", 0), cache.get("sessionLimit", 0)
    return (
        f'<p><b id="live-sessions">{int(active)}</b> of {int(limit)} cache sessions in '
        f"progress · {int(cache.get('bypasses', 0))} bypassed since start</p>"
    )


def _store(store: Mapping[str, Any] | None, snap: Snapshot, now: float) -> str:
    rows: list[tuple[str, str]] = []
    if store is None:
        rows.append(("store", "none (the cache has never been enabled)"))
    elif "error" in store:
        rows.append(("store", f"unreadable: {store['error']}"))
    else:
        payloads = store["counts"]["payloads"]
        rows += [
            ("file", f"{size(store['fileBytes'])} (WAL {size(store['walBytes'])})"),
            ("payloads", ("" if payloads["exact"] else ">= ") + str(payloads["value"])),
            ("payload bytes", size(store["payloadBytes"]["value"])),
        ]
        oldest = store.get("oldestPayloadTouchedAt")
        if oldest is not None:
            rows.append(("oldest touched", f"{duration(now - oldest)} ago"))
    retention = snap.retention
    if retention is not None:
        barrier = retention["barrier"]
        state = "open" if barrier["open"] else f"closed ({duration(barrier['remainingSeconds'])})"
        rows += [
            ("retention", f"{retention['retentionDays']:g} days, cleanup every "
                          f"{duration(retention['cleanupIntervalSeconds'])}"),
            ("deletion barrier", state),
            ("reclaimed", f"{retention['reclaimed']} payloads in {retention['runs']} runs"),
        ]  # fmt: skip
    if snap.stats_bytes is not None:
        rows.append(("diagnostics database", size(snap.stats_bytes)))
    body = "".join(f"<tr><td>{escape(k)}</td><td>{escape(v)}</td></tr>" for k, v in rows)
    return f'<table id="store-table">{body}</table>'


def hours_of(delta: HourDelta, now_hour: int, count: int = 24) -> list[HourPoint]:
    """The last ``count`` hours of ``delta``, oldest first (an hour without traffic is an
    empty point, so the chart's time axis has no gaps)."""
    by_hour: dict[int, list[tuple[Key, Tally]]] = {}
    for key, tally in delta.tallies.by_key.items():
        by_hour.setdefault(key.hour, []).append((key, tally))
    out = []
    for i in range(count - 1, -1, -1):
        hour = now_hour - i * HOUR_S
        summary = summarize(by_hour.get(hour, []))
        outcomes = {name: t.requests for name, t in summary.by_outcome.items()}
        out.append(HourPoint(hour, outcomes, summary.with_replay, summary.without_replay))
    return out
