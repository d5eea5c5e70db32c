"""``nox -s bench``: the relay and its cache as ratios measured in one run.

First row: what the relay adds to the time to the first content byte (relay - direct,
cache off and on, in ms and as ratios), measured with raw HTTP at a small history and at
201 and 1,000 messages, against issue 29's targets, with the load average beside it (the
machine is shared). The cache-on relay's profile at each conversation size is kept in the
output's folder (``relay-cache-<n>.prof``, ``profile-cache-<n>.md``).

Relay vs direct-to-fake: both servers run as real subprocesses (as in production); the
client is a raw streaming HTTP client in this process that keeps one connection to each
server alive, as Cursor does. Each round sends one request directly, one through the
relay with the cache off and one through a relay with the cache on, so machine noise hits
them alike, and reports medians; each round does so for a burst stream (throughput) and a
paced one (time to first token), see :func:`run_servers`. The same at a long Cursor
conversation (201 messages / 108 KB and 1,000), where the cache on replays the earlier
turns, with a cProfile breakdown of what the cache adds: :mod:`bench.conversation`. The
same added time beside a bare TCP hop (the floor of any proxy) and, with ``--litellm
PATH``, beside LiteLLM's Chat→Responses bridge, on the same fake (``nox -s bench_litellm``
installs it): :mod:`bench.contestants`.

In-process sections (identity, cache path, commits) compare the relay's code against a
stdlib baseline measured on the same data in the same process (see ``bench_identity`` and
``bench_cache``). Results are printed as markdown tables and written as JSON; nothing
here asserts a time limit.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.cache import bench_cache_scaling, bench_commits, profile_cache_path
from bench.contestants import run_contestants
from bench.conversation import SIZES as CONVERSATIONS
from bench.conversation import run_conversations
from bench.identity import (
    SIZES,
    bench_canonical_vs_stdlib,
    bench_identity_scaling,
    cursor_history,
    paired_ratio,
)
from bench.servers import (
    KEY,
    TOKEN,
    Sample,
    added_time,
    enqueue,
    events_to_first_delta,
    load_average,
    process,
    relay_env,
    relay_profile,
    stream_once,
)
from bench.shared_store import run_shared_store, shared_store_report
from bench.store_growth import STEPS as GROWTH_STEPS
from bench.store_growth import VARIANT_STEPS, bench_store_growth, growth_report

DELTAS = 300
MODES = ("direct", "relay", "relay_cache")
STREAMS = ("burst", "paced")
PACE_MS = 0.5  # between paced events: 2,000 tokens/s, faster than any model streams
PROFILE_ROUNDS = 100  # requests a profiled relay serves (amortizes its startup)
SERVER_ROWS = {
    "ttft_s": "ttft, paced (ms)", "ttft_burst_s": "ttft, burst (ms)",
    "total_burst_s": "total, burst (ms)", "events_per_s": "events/s, burst",
}  # fmt: skip
LABELS = {"direct": "direct", "relay": "relay (cache off)", "relay_cache": "relay (cache on)"}
ADDED_TARGETS_MS = {"small": 3.0, "201": 4.0}  # relay (cache on) - direct, issue 29


def run_servers(iterations: int, *, profile: Path | None = None) -> dict[str, Any]:
    """Direct vs relay (cache off) vs relay (cache on) on one small request, streamed two
    ways by the same script: ``burst`` (every event as fast as the fake can write it: the
    throughput row) and ``paced`` (the events up to the first text delta at once, the rest
    PACE_MS apart, as a model streams: the time-to-first-token row).

    Why two: on a small machine a burst keeps the fake and the relay both busy converting
    later events while the client waits for a CPU to read the first one, so the burst's
    first-token time mostly measures the scheduler. The fake's answer, and so its own time
    to the first token, is identical in both.

    With ``profile``, the cache-on relay runs under cProfile (stats written to that file
    when it stops) and only its samples are meaningful for the profile, not the ratios.
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    burst = {
        "output": [{"type": "reasoning", "summary": ["plan"]},
                   {"type": "message", "text": "x" * DELTAS}],
        "delta_size": 1,
    }  # fmt: skip
    small = {"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    direct_body = {"model": "gpt-5", "input": [{"role": "user", "content": "hi"}], "stream": True}
    direct_headers = {"Authorization": f"Bearer {KEY}"}
    relay_cmd = [sys.executable, "-m", "relay", "serve"]
    cached_cmd = relay_cmd if profile is None else [
        sys.executable, "-m", "cProfile", "-o", str(profile), *relay_cmd[1:]
    ]  # fmt: skip
    samples: dict[str, dict[str, list[Sample]]] = {
        stream: {mode: [] for mode in MODES} for stream in STREAMS
    }
    load = [load_average()]
    with (
        tempfile.TemporaryDirectory() as off_data,
        tempfile.TemporaryDirectory() as on_data,
        process(
            [sys.executable, "-m", "fakeupstream", "--port", "0"], env, "fakeupstream listening"
        ) as fake_port,  # fmt: skip
        process(
            relay_cmd, relay_env(env, fake_port, off_data, cache=False), "relay listening"
        ) as relay_port,  # fmt: skip
        process(
            cached_cmd, relay_env(env, fake_port, on_data, cache=True), "relay listening"
        ) as cached_port,  # fmt: skip
    ):
        ports = {"direct": fake_port, "relay": relay_port, "relay_cache": cached_port}
        conns = {
            mode: http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            for mode, port in ports.items()
        }
        enqueue(fake_port, burst)
        leading = events_to_first_delta(conns["direct"], direct_body, direct_headers)
        scripts = {
            "burst": burst,
            "paced": {**burst, "toxics": {"latency_ms": PACE_MS,
                                          "latency_after_events": leading}},
        }  # fmt: skip
        for i in range(iterations + 2):
            for stream in STREAMS:
                for mode in MODES:
                    enqueue(fake_port, scripts[stream])
                    if mode == "direct":
                        sample = stream_once(conns[mode], "/v1/responses", direct_body,
                                             direct_headers,
                                             lambda f: b"output_text.delta" in f)  # fmt: skip
                    else:
                        sample = stream_once(conns[mode], "/v1/chat/completions", small,
                                             {"Authorization": f"Bearer {TOKEN}"},
                                             lambda f: b'"content":"x' in f)  # fmt: skip
                    if i >= 2:  # warm-up rounds are discarded
                        samples[stream][mode].append(sample)
        for conn in conns.values():
            conn.close()
    load.append(load_average())
    return {**summarize(samples, leading), "load_average": load}


def summarize(samples: dict[str, dict[str, list[Sample]]], leading: int) -> dict[str, Any]:
    """Medians per mode; each ratio is the median of the rounds' ratios (the modes of a
    round ran back to back, see :func:`bench.identity.paired_ratio`)."""

    def seconds(stream: str, index: int) -> dict[str, list[float]]:
        return {mode: [s[index] for s in samples[stream][mode]] for mode in MODES}

    def row(times: dict[str, list[float]]) -> dict[str, float]:
        return {**{mode: statistics.median(times[mode]) for mode in MODES},
                "ratio": paired_ratio(times, ["relay"], "direct"),
                "ratio_cache": paired_ratio(times, ["relay_cache"], "direct")}  # fmt: skip

    total = seconds("burst", 1)
    ttft = seconds("paced", 0)
    rows = {"ttft_s": row(ttft), "ttft_burst_s": row(seconds("burst", 0)),
            "total_burst_s": row(total)}  # fmt: skip
    rows["events_per_s"] = {
        **{mode: DELTAS / rows["total_burst_s"][mode] for mode in MODES},
        "ratio": paired_ratio(total, ["direct"], "relay"),
        "ratio_cache": paired_ratio(total, ["direct"], "relay_cache"),
    }
    frames = {s[2] for stream in samples.values() for mode in stream.values() for s in mode}
    return {
        "deltas": DELTAS, "pace_ms": PACE_MS, "unpaced_leading_events": leading,
        "iterations": len(samples["burst"]["relay"]), "content_frames": sorted(frames),
        "rows": rows, "target_ttft_ratio_cache": 1.5, "added": added_time(ttft),
    }  # fmt: skip


# --- output ----------------------------------------------------------------------------


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f}"


def x(ratio: float) -> str:
    return f"{ratio:.2f}x"


def load(values: list[float]) -> str:
    return " → ".join(f"{value:.2f}" for value in values)


def added_report(result: dict[str, Any]) -> list[str]:
    """The paired raw-HTTP row: what the relay adds to the time to the first content byte,
    small history (:func:`run_servers`) and long conversations (:mod:`bench.conversation`),
    against issue 29's targets for the cache-on relay."""
    rows = []
    servers = result.get("servers")
    if servers:
        rows.append(("small", servers["iterations"], servers["rows"]["ttft_s"],
                     servers["added"], servers["load_average"]))  # fmt: skip
    for row in (result.get("conversations") or {}).get("rows", []):
        rows.append((str(row["messages"]), result["conversations"]["iterations"],
                     row, row["added"], row["load_average"]))  # fmt: skip
    if not rows:
        return []
    body = []
    for name, rounds, times, added, loads in rows:
        key = "" if name == "small" else "_s"
        target = ADDED_TARGETS_MS.get(name)
        on = added["relay_cache_s"] * 1000
        verdict = "-" if target is None else f"≤ {target:g}: {'met' if on <= target else 'MISSED'}"
        body.append([
            name, str(rounds), *(ms(times[f"{mode}{key}"]) for mode in MODES),
            ms(added["relay_s"]), ms(added["relay_cache_s"]),
            ms(added.get("relay_cache_net_s", added["relay_cache_s"])),
            x(added["relay_ratio"]), x(added["relay_cache_ratio"]), verdict, load(loads),
        ])  # fmt: skip
    return [
        "### Raw HTTP: what the relay adds to the time to the first content byte "
        "(paired interleaved rounds; medians)",
        table(
            [
                "history",
                "rounds",
                "direct ms",
                "cache off ms",
                "cache on ms",
                "added, off ms",
                "added, on ms",
                "added, on, net of the replaying body ms",
                "off/direct",
                "on/direct",
                "target, added on (ms)",
                "load average (1 min)",
            ],
            body,
        ),
        "http.client on a kept-alive connection, no SDK; the first content byte is the "
        "read that completes the first SSE frame with content (direct: the first "
        "`output_text.delta`; relay: the first chunk with `content`). Each round sends "
        "direct, cache off and cache on back to back; added = median of the rounds' "
        "(relay - direct), the ratios the median of the rounds' relay / direct. Small: "
        "the paced stream of the first table; 201 and 1,000: the long conversations, the "
        "cache-on relay replaying every earlier reasoning item. Added, on includes the "
        "upstream's own extra time on the larger replaying body (the fake parses it too); "
        "net of the replaying body = median of the rounds' (cache on - direct with the "
        "cache-on relay's upstream body), what the relay itself adds (small: nothing is "
        "replayed, the same as added, on). The target is judged on added, on.",
    ]


def contestants_report(result: dict[str, Any]) -> list[str]:
    """The relay's added time to first token beside the floor of any proxy hop (and
    LiteLLM's, when it ran): :mod:`bench.contestants`."""
    with_litellm = any("ratio" in row for row in result["rows"])
    out = ["### Added time to first token: the relay beside a bare TCP hop"
           + (" and LiteLLM's Chat→Responses bridge" if with_litellm else "")
           + f" (one fake, {result['iterations']} rounds, order rotating; medians)"]  # fmt: skip
    rows = []
    for row in result["rows"]:
        added, floor = row["added_s"], row["above_floor_s"]
        cells = [
            row["history"], str(row["rounds"]), str(row["replayed_turns"]), ms(row["direct_s"]),
            ms(added["floor"]), ms(added["relay"]), ms(added["relay_cache"]),
            ms(row["relay_cache_net_s"]), ms(floor["relay"]), ms(floor["relay_cache"]),
        ]  # fmt: skip
        if with_litellm:
            ratio = row["ratio"]
            verdict = "met" if ratio["relay_cache"] <= result["target_ratio"] else "MISSED"
            cells += [ms(added["litellm"]), f"{ratio['relay']:.3f}x",
                      f"{ratio['relay_cache']:.3f}x", f"≤ {result['target_ratio']}x: {verdict}"]  # fmt: skip
        rows.append([*cells, load(row["load_average"])])
    header = ["history", "rounds", "replayed", "direct ms", "TCP hop added ms",
              "relay off added ms", "relay on added ms", "relay on, net of the replaying body ms",
              "off above the hop ms", "on (net) above the hop ms"]  # fmt: skip
    if with_litellm:
        header += ["LiteLLM added ms", "off / LiteLLM", "on / LiteLLM", "target, on / LiteLLM"]
    out.append(table([*header, "load average (1 min)"], rows))
    out.append(
        "Added = median of the rounds' (contestant - direct). The TCP hop "
        "(`bench/floor_proxy.py`) copies bytes between the client and the fake on the relay's "
        "event loop, parsing nothing: what one more process in the path costs here, the floor "
        "under any relay; above the hop = median of the rounds' (relay - hop), the cache-on "
        "relay net of the upstream's extra work on its replaying body (measured direct with "
        "that body in the same rounds)."
        + (" LiteLLM: its proxy with one deployment `openai/responses/<model>` whose api_base "
           "is the fake, so it bridges Chat to the Responses API as the relay does."
           if with_litellm else "")
    )  # fmt: skip
    return out


def report(result: dict[str, Any]) -> str:
    out = added_report(result)
    if "contestants" in result:
        out += contestants_report(result["contestants"])
    servers = result.get("servers")
    if servers:
        out.append(f"### Relay vs direct-to-fake ({servers['iterations']} runs, "
                   f"{servers['deltas']}-delta stream, small history; medians)")  # fmt: skip
        body = []
        for name, row in servers["rows"].items():
            scale = 1.0 if name == "events_per_s" else 1000.0
            body.append([SERVER_ROWS[name], *(f"{row[m] * scale:.2f}" for m in MODES),
                         x(row["ratio"]), x(row["ratio_cache"])])  # fmt: skip
        out.append(table(["metric", *(LABELS[m] for m in MODES), "off/direct", "on/direct"],
                         body))  # fmt: skip
        ttft = servers["rows"]["ttft_s"]
        out.append(
            "Added to the first token by the relay: "
            f"{ms(ttft['relay'] - ttft['direct'])} ms with the cache off, "
            f"{ms(ttft['relay_cache'] - ttft['direct'])} ms with it on (upstream connections "
            "are kept alive, so that is neither a TCP nor a TLS handshake). "
            f"Paced: the first {servers['unpaced_leading_events']} events (through the first "
            f"text delta) at once, then one every {servers['pace_ms']} ms; burst: all at "
            "once, which on a small machine leaves the client waiting for a CPU while the "
            "fake and the relay work through later events. "
            "Target: ttft (paced) cache on / direct ≤ 1.5x."
        )
    conversations = result.get("conversations")
    if conversations:
        out += conversation_report(conversations)
    canonical = result["canonical"]
    out.append(f"### Canonicalize + hash vs stdlib floor ({canonical['messages']} messages, "
               f"{canonical['canonical_bytes'] / 1e6:.1f} MB canonical; times: best of runs, ratios: median of paired runs)")  # fmt: skip
    out.append(table(
        ["contender", "ms", "throughput vs floor"],
        [["floor: json.dumps(sort_keys) + sha256", ms(canonical["floor_seconds"]), "1.00x"],
         ["history_digests (the relay's path: + a digest per boundary, envelopes)",
          ms(canonical["identity_seconds"]), x(canonical["ratio_identity_to_floor"])],
         ["generic: normalize + Budget.render_text + framing, one sha256",
          ms(canonical["canonical_seconds"]), x(canonical["ratio_canonical_to_floor"])]],
    ))  # fmt: skip
    out.append("Target: ≥ 0.50x of the floor's throughput.")
    identity = result["identity"]
    out.append(
        "### Identity only (scope + history_digests) vs json.loads of the body "
        "(times: best of runs, ratios: median of paired runs)"
    )
    out.append(table(
        ["messages", "body MB", "json.loads ms", "identity ms", "identity/loads",
         "µs/message", "identity, renderings remembered ms"],
        [[str(r["messages"]), f"{r['body_bytes'] / 1e6:.2f}", ms(r["loads_seconds"]),
          ms(r["identity_seconds"]), x(r["ratio"]), f"{r['identity_us_per_message']:.1f}",
          ms(r["identity_warm_seconds"])]
         for r in identity["rows"]],
    ))  # fmt: skip
    out.append(f"Linearity (µs/message, largest / second largest): {identity['linearity']:.2f}. "
               "Target: identity/loads ≤ 2x at 6,400 messages.")  # fmt: skip
    path = result["cache_path"]
    out.append("### Cache path: ReplayCache.begin + CacheSession.dispatch vs json.loads "
               "(populated store, synchronous=FULL; times: best of runs, ratios: median of paired runs)")  # fmt: skip
    out.append(table(
        ["messages", "records", "replayed", "json.loads ms", "begin ms", "plan ms",
         "plan cold ms", "dispatch ms", "total ms", "begin/loads", "(begin+plan)/loads",
         "(begin+plan cold)/loads", "total/loads", "µs/message (begin, dispatch)"],
        [[str(r["messages"]), str(r["records"]), str(r["replayed_blocks"]),
          ms(r["loads_seconds"]), ms(r["begin_seconds"]), ms(r["plan_seconds"]),
          ms(r["plan_cold_seconds"]), ms(r["dispatch_seconds"]), ms(r["total_seconds"]),
          x(r["ratio_identity"]), x(r["ratio_identity_plan"]),
          x(r["ratio_identity_plan_cold"]), x(r["ratio"]),
          f"{r['us_per_message']:.1f} ({r['identity_us_per_message']:.1f}, "
          f"{r['dispatch_us_per_message']:.1f})"]
         for r in path["rows"]],
    ))  # fmt: skip
    out.append(f"Linearity (µs/message, largest / second largest): total "
               f"{path['linearity']:.2f}, begin {path['linearity_identity']:.2f}. Planning "
               "follows the plan (at most max_plan_records blocks), not the history length; "
               "plan = the planning inside dispatch alone, with the hot cache warm as for "
               "the next turn of a conversation; plan cold = with it empty, as after a "
               "start; dispatch = plan + intent transaction (fsync). "
               "Target: (begin+plan)/loads ≤ 2x at 6,400 messages.")  # fmt: skip
    growth = result.get("store_growth")
    if growth:
        out += growth_report(growth, table)
    commits = result["commits"]
    out.append(f"### SQLite commits at synchronous=FULL ({commits['rounds']} rounds, "
               f"{commits['history_messages']}-message history)")  # fmt: skip
    out.append(table(
        ["transaction", "median ms", "min ms"],
        [[name, f"{commits['median_ms'][name]:.3f}", f"{commits['min_ms'][name]:.3f}"]
         for name in commits["median_ms"]],
    ))  # fmt: skip
    for key in ("relay_profile", "cache_profile"):
        rows = result.get(key)
        if rows:
            what = "the cache-on relay" if key == "relay_profile" else "begin + dispatch"
            out.append(f"### Profile of {what}: top own time per request (cProfile)")
            out.append(table(["function", "own ms", "cumulative ms"],
                             [[r["function"], f"{r['own_ms']:.3f}", f"{r['cumulative_ms']:.3f}"]
                              for r in rows]))  # fmt: skip
    return "\n\n".join(out)


def conversation_report(result: dict[str, Any]) -> list[str]:
    out = [f"### Time to first token at a long Cursor conversation ({result['iterations']} "
           f"paired rounds, {result['deltas']}-delta paced stream; medians)"]  # fmt: skip
    body = []
    for row in result["rows"]:
        probe = row["continuity"]["before"]["relay_cache"]
        target = row["target_ms"]
        difference = row["on_minus_off_s"] * 1000
        share = row["relay_share_s"] * 1000
        verdict = "-" if target is None else (
            f"≤ {target:g}: {'met' if share <= target else 'MISSED'}"
        )  # fmt: skip
        body.append([
            str(row["messages"]), f"{row['history_bytes'] / 1000:.0f}",
            f"{row['assistant_turns']} / {probe['replayed']}",
            *(ms(row[f"{mode}_s"]) for mode in ("direct", "direct_replay", "relay", "relay_cache")),
            f"{difference:.3f}", f"{share:.3f}", verdict, load(row["load_average"]),
        ])  # fmt: skip
    out.append(table(
        ["messages", "history KB", "assistant turns / replayed", "direct ms",
         "direct, replaying body ms", "cache off ms", "cache on ms", "on - off ms",
         "cache's own share ms", "target, own share (ms)", "load average (1 min)"], body,
    ))  # fmt: skip
    out.append(
        "The conversation was grown through a cache-on relay first (each assistant turn "
        "admitted as the answer to the history before it); the fake's continuity probe "
        "confirmed, before and after timing, that the cache-on request replays that many "
        "reasoning items, all intact (cache off: none). on - off is the median of the "
        "rounds' differences. Direct, replaying body: the fake sent what the cache-on relay "
        "sends it (the same history plus the replayed items), so that minus direct is the "
        "upstream's share of on - off and the cache's own share is the rest (median of "
        "the rounds' (on - off) - (replaying - direct)). The plan bound is raised to the "
        "conversation's length, so every earlier block is replayed (checked: replayed = "
        "assistant turns). Target: own share ≤ 2 ms at 201 messages, ≤ 6 ms at 1,000."
    )
    out.append(table(
        ["messages", "upstream body KB, cache off / on", "grow s", "rounds s", "profile s"],
        [[str(row["messages"]),
          f"{row['upstream_bytes']['relay'] / 1000:.0f} / "
          f"{row['upstream_bytes']['relay_cache'] / 1000:.0f}",
          *(f"{row['phases'][key]:.1f}" for key in ("grow_s", "rounds_s", "profile_s"))]
         for row in result["rows"]],
    ))  # fmt: skip
    for row in result["rows"]:
        profile = row["profile"]
        out.append(
            f"#### Where the cache-on difference goes at {row['messages']} messages "
            f"(cProfile, {result['profile_rounds']} requests to each relay; per request, "
            "cache on minus cache off, profiled times inflated by cProfile; all own time: "
            f"{profile['on_total_own_ms']:.2f} on - {profile['off_total_own_ms']:.2f} off = "
            f"{profile['total_own_ms']:.2f} ms)"
        )  # fmt: skip
        for key, what in (("by_cumulative", "cumulative"), ("by_own", "own")):
            out.append(f"Top by {what} difference"
                       f"{' (relay code)' if what == 'cumulative' else ''}:")  # fmt: skip
            out.append(table(
                ["function", "Δ cumulative ms", "Δ own ms", "cache-on cumulative ms"],
                [[r["function"], f"{r['cumulative_ms']:.3f}", f"{r['own_ms']:.3f}",
                  f"{r['on_cumulative_ms']:.3f}"] for r in profile[key]],
            ))  # fmt: skip
        out += left_report(row["messages"], result["profile_rounds"], profile)
    return out


def left_report(messages: int, requests: int, profile: dict[str, Any]) -> list[str]:
    """What is left: the cache-on relay's own profile, not a difference."""
    out = [f"#### What is left at {messages} messages: the cache-on relay's profile "
           f"(cProfile, {requests} requests, per request, all own time "
           f"{profile['on_total_own_ms']:.2f} ms; profiled times inflated by cProfile)"]  # fmt: skip
    for key, what in (("on_relay_by_cumulative", "cumulative (relay code)"),
                      ("on_by_own", "own (all code)")):  # fmt: skip
        out.append(f"Top by {what}:")
        out.append(table(["function", "cumulative ms", "own ms"],
                         [[r["function"], f"{r['cumulative_ms']:.3f}", f"{r['own_ms']:.3f}"]
                          for r in profile[key]]))  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=30, help="relay rounds")
    parser.add_argument("--repeat", type=int, default=7, help="in-process samples per row")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--no-servers", action="store_true", help="in-process sections only")
    parser.add_argument("--profile", action="store_true",
                        help="also cProfile the cache-on relay and the cache path")  # fmt: skip
    parser.add_argument("--conversation-iterations", type=int, default=30,
                        help="rounds per long-conversation row")  # fmt: skip
    parser.add_argument("--conversation-sizes", type=int, nargs="*", default=list(CONVERSATIONS),
                        help="messages of the long-conversation rows (none: skip them)")  # fmt: skip
    parser.add_argument("--growth-steps", type=int, nargs="*", default=list(GROWTH_STEPS),
                        help="agent steps of the store-growth rows (none: skip them)")  # fmt: skip
    parser.add_argument("--shared-iterations", type=int, default=20,
                        help="paired rounds of the PostgreSQL vs SQLite row (0: skip the "
                        "shared-store section)")  # fmt: skip
    parser.add_argument("--contestant-iterations", type=int, default=30,
                        help="rounds per row of the TCP hop / relay (/ LiteLLM) comparison "
                        "(0: skip it)")  # fmt: skip
    parser.add_argument("--litellm", type=Path, metavar="PATH",
                        help="a LiteLLM proxy executable (`litellm`): LiteLLM's bridge joins "
                        "that comparison")  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("bench-results/bench.json"))
    args = parser.parse_args()
    if args.litellm is not None and (args.no_servers or not args.contestant_iterations):
        parser.error("--litellm joins the contestants comparison, which --no-servers or "
                     "--contestant-iterations 0 skips")  # fmt: skip
    sizes = sorted(args.sizes)
    result: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine()}
    if not args.no_servers:
        result["servers"] = run_servers(args.iterations)
        if args.conversation_sizes:
            result["conversations"] = run_conversations(
                tuple(args.conversation_sizes),
                iterations=args.conversation_iterations,
                keep=args.out.parent,
            )
            for row in result["conversations"]["rows"]:
                left = left_report(row["messages"], result["conversations"]["profile_rounds"],
                                   row["profile"])  # fmt: skip
                (args.out.parent / f"profile-cache-{row['messages']}.md").write_text(
                    "\n\n".join(left) + "\n"
                )
        if args.contestant_iterations:
            result["contestants"] = run_contestants(args.contestant_iterations, args.litellm)
        if args.shared_iterations:
            result["shared_store"] = run_shared_store(args.shared_iterations)
    result["canonical"] = bench_canonical_vs_stdlib(cursor_history(sizes[-1]), repeat=args.repeat)
    result["identity"] = bench_identity_scaling(sizes, repeat=args.repeat)
    result["cache_path"] = bench_cache_scaling(sizes, repeat=args.repeat)
    result["commits"] = bench_commits()
    if args.growth_steps:
        result["store_growth"] = bench_store_growth(
            args.growth_steps, [s for s in VARIANT_STEPS if s <= max(args.growth_steps)]
        )
    if args.profile:
        if not args.no_servers:
            rounds = max(args.iterations, PROFILE_ROUNDS)
            with tempfile.TemporaryDirectory() as scratch:
                stats = Path(scratch) / "relay.prof"
                run_servers(rounds, profile=stats)
                # Each round sends every stream once to the profiled relay, warm-ups included.
                result["relay_profile"] = relay_profile(stats, len(STREAMS) * (rounds + 2))
        result["cache_profile"] = [
            {"function": name, "own_ms": own * 1000, "cumulative_ms": cumulative * 1000}
            for name, own, cumulative in profile_cache_path(sizes[-1])
        ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(report(result))
    if "shared_store" in result:
        print("\n" + "\n".join(shared_store_report(result["shared_store"])))
    print(f"\nwritten: {args.out}")


if __name__ == "__main__":
    main()
