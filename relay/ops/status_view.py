"""``relay status``: the admin status as a compact table for a person.

Colour (ANSI) only when writing to a terminal and ``NO_COLOR`` is unset; plain text
otherwise, so a pipe or a log gets no escape codes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

GREEN, YELLOW, RED, DIM, RESET = "\033[32m", "\033[33m", "\033[31m", "\033[2m", "\033[0m"


def duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def clock_time(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).strftime("%H:%M:%SZ")


def _rate(accepted: int, dispatched: int) -> str:
    if dispatched == 0:
        return "none dispatched"
    return f"{accepted}/{dispatched} accepted ({100 * accepted // dispatched}%)"


def fence_line(fenced: dict[str, Any]) -> str:
    """``replay fenced 37 times in the last hour: input item type 'reasoning' 30, ...``"""
    seconds = fenced["windowSeconds"]
    window = "the last hour" if seconds >= 3600 else f"the last {duration(seconds)}"
    times = "once" if fenced["count"] == 1 else f"{fenced['count']} times"
    reasons = fenced["reasons"]
    if len(reasons) == 1:
        why = reasons[0]["text"]
    else:
        why = ", ".join(f"{r['text']} {r['count']}" for r in reasons)
    return f"replay fenced {times} in {window}: {why}"


def _bounded(entry: dict[str, Any], text: str) -> str:
    return text if entry["exact"] else f">= {text}"


def render(doc: dict[str, Any], *, colour: bool) -> str:
    def paint(code: str, text: str) -> str:
        return f"{code}{text}{RESET}" if colour else text

    relay, replay, cache = doc["relay"], doc["replay"], doc["cache"]
    rows: list[tuple[str, str]] = []
    rows.append(("uptime", f"{duration(relay['uptimeSeconds'])} (relay {relay['version']})"))
    rows.append(("upstream", relay["upstream"]))
    tunnel = relay.get("tunnel")
    if tunnel:
        paint_as = (
            GREEN if tunnel["state"] == "up" else YELLOW if tunnel["state"] == "starting" else RED
        )
        where = f" {tunnel['url']}" if tunnel.get("url") else ""
        rows.append(("tunnel", paint(paint_as, f"{tunnel['state']}{where} ({tunnel['program']})")))
    state = relay["cache"]
    rows.append(("cache", paint(GREEN if state == "on" else YELLOW, state)))
    hour = replay["lastHour"]
    window = "last hour" if hour["windowSeconds"] >= 3600 else (
        f"last {duration(hour['windowSeconds'])}")  # fmt: skip
    rows.append(("replay", f"{window}: {_rate(hour['accepted'], hour['dispatched'])}; "
                 f"since start: {_rate(replay['accepted'], replay['dispatched'])}"))  # fmt: skip
    if replay["rejected"]:
        reasons = ", ".join(f"{k} {v}" for k, v in replay["rejectedByReason"].items())
        rows.append(("rejected", paint(YELLOW, f"{replay['rejected']} ({reasons})")))
    fenced = cache.get("fencedLastHour")
    if fenced and fenced["count"]:
        rows.append(("fenced", paint(YELLOW, fence_line(fenced))))
    limited = _limited(cache)
    rows.append(("sessions", f"{cache['activeSessions']} active of {cache['sessionLimit']}, "
                 f"{cache['bypasses']} bypassed"
                 + (paint(YELLOW, limited) if limited else "")))  # fmt: skip
    for provider, counts in (doc.get("strict") or {}).items():
        rows.append(("strict", f"{provider}: {counts['restored']} restored, "
                     f"{counts['missed']} missed, {counts['stripped']} stripped"))  # fmt: skip
    latest = doc["errors"]["latest"]
    if latest:
        text = ", ".join(f"{e['code']} x{e['count']} (last {clock_time(e['lastAt'])})"
                         for e in latest)  # fmt: skip
        rows.append(("last errors", paint(RED, text)))
    else:
        rows.append(("last errors", paint(GREEN, "none")))
    rows.append(("store", _store(doc.get("store"), relay["now"])))
    if relay.get("shared"):
        rows.append(("shared", _shared(relay["shared"])))
    snapshot = doc["snapshot"]
    if snapshot["running"] and snapshot["progress"]:
        p = snapshot["progress"]
        rows.append(("snapshot", f"copying {p['copiedPages']}/{p['totalPages']} pages"))
    elif snapshot["last"]:
        rows.append(("snapshot", f"last: {snapshot['last']['path']}"))
    if relay.get("metricsUrl"):
        rows.append(("metrics", relay["metricsUrl"]))
    width = max(len(label) for label, _ in rows)
    table = "\n".join(f"{paint(DIM, label.ljust(width))}  {value}" for label, value in rows)
    buys = doc.get("replayBuys")
    if buys is None:
        return table
    # No blank line between: every line stays "<label>  <value>" for scripts that split it.
    return table + "\n" + replay_buys(buys, paint=lambda text: paint(DIM, text))


WINDOW_TITLES = (("lastHour", "last hour"), ("lastDay", "last day"), ("last30Days", "last 30 days"))


def tokens(n: int) -> str:
    """``950``, ``12.3k``, ``4.6M``."""
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.1f}M"


def share(entry: dict[str, Any]) -> str:
    if entry["share"] is None:
        return "-"
    return f"{100 * entry['share']:.1f}% of {tokens(entry['input'])}"


def _reasons(counts: dict[str, int]) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def replay_buys(buys: dict[str, Any], *, paint: Any = str) -> str:
    """``what replay buys``: one column per window, one row per figure."""
    windows = [buys[key] for key, _ in WINDOW_TITLES]
    if all(w["requests"] == 0 and not w["events"] for w in windows):
        return f"{paint('what replay buys')}  no traffic yet"

    def latency(w: dict[str, Any]) -> str:
        added = w["addedLatency"]
        return "-" if added["count"] == 0 else f"{added['p50Ms']} / {added['p95Ms']} ms"

    def replayed(w: dict[str, Any]) -> str:
        n = w["byOutcome"].get("replayed", {}).get("requests", 0)
        return f"{n} of {w['requests']}"

    def saving(w: dict[str, Any]) -> str:
        est = w["estimate"]
        return "-" if est is None else f"{est['saving']:.2f} of {est['cost']:.2f} spent"

    figures: list[tuple[str, Any]] = [
        ("requests replayed", replayed),
        ("cached input, replay", lambda w: share(w["withReplay"])),
        ("cached input, none", lambda w: share(w["withoutReplay"])),
        ("reasoning tokens", lambda w: tokens(w["reasoningTokens"])),
        ("output tokens", lambda w: tokens(w["outputTokens"])),
        ("added TTFB p50 / p95", latency),
    ]
    if buys.get("pricesConfigured"):
        figures.append(("est. saving", saving))
    header = ["what replay buys", *(title for _, title in WINDOW_TITLES)]
    cells = [header] + [[label, *(str(f(w)) for w in windows)] for label, f in figures]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = [
        "  ".join(
            (paint(cell.ljust(widths[i])) if i == 0 or row is header else cell.ljust(widths[i]))
            for i, cell in enumerate(row)
        ).rstrip()
        for row in cells
    ]
    # Reasons over the longest window (a column each would not fit a terminal), only when
    # there are some, as the rows above leave out a rejected or fenced row with nothing.
    month = windows[-1]["events"]
    for kind in ("rejected", "fenced"):
        if month.get(kind):
            lines.append(f"{paint(f'{kind} (30 days)')}  {_reasons(month[kind])}")
    return "\n".join(lines)


def _shared(shared: dict[str, Any]) -> str:
    """The shared PostgreSQL store: where, how many relays hold a lease, this one's."""
    live = shared.get("liveInstances")
    if live is None:
        return f"{shared['database']}: leases unreadable (the database cannot be reached)"
    own = next((i for i in live if i["id"] == shared["instance"]), None)
    mine = (
        f"this relay {shared['instance']} lease {own['leaseExpiresInSeconds']:.1f}s"
        if own is not None
        else f"this relay {shared['instance']} holds no live lease"
    )
    lapses = f", {shared['leaseLapses']} lapses" if shared.get("leaseLapses") else ""
    return f"{shared['database']}: {len(live)} live relays ({mine}{lapses})"


def _store(store: dict[str, Any] | None, now: float) -> str:
    if store is None:
        return "none (the cache has never been enabled)"
    if "error" in store:
        return f"unreadable: {store['error']}"
    payloads = store["counts"]["payloads"]
    parts = [
        f"{size(store['fileBytes'])} (WAL {size(store['walBytes'])})",
        _bounded(payloads, f"{payloads['value']} payloads"),
        _bounded(store["payloadBytes"], size(store["payloadBytes"]["value"])),
    ]
    oldest = store["oldestPayloadTouchedAt"]
    if oldest is not None:
        parts.append(f"oldest touched {duration(now - oldest)} ago")
    return ", ".join(parts)


def _limited(cache: dict[str, Any]) -> str:
    """Why the session limit is below REASONING_CACHE_MAX_CONCURRENT, when it is."""
    configured = cache.get("sessionLimitConfigured")
    if not isinstance(configured, int) or configured <= cache["sessionLimit"]:
        return ""
    return (
        f" (REASONING_CACHE_MAX_CONCURRENT={configured}; the memory budget fits "
        f"{cache['sessionLimit']}: raise REASONING_CACHE_MEMORY_BYTES)"
    )
