"""Time to first token at a long Cursor conversation, direct vs relay (cache off, on).

The history has the recordings' mix (:func:`bench.identity.cursor_history`: tool calls and
their results, assistant text), its tool results clipped so that 201 messages come to
about 108 KB (the issue's measurement) and other lengths scale alike, and it ends with a
user message. Before timing, the conversation is *grown* through a cache-on relay as
Cursor would: for each assistant message, the history before it is sent with a fake
script that answers with exactly that message (reasoning, text, tool calls), so the
relay admits every block it later replays. The check that it does: a request the fake
answers with its continuity probe (``replayed=N intact=N``), before and after timing.

Then rounds as in :func:`bench.__main__.run_servers` (paced stream, medians, the
difference as the median of the rounds' differences); then a second pair of relays
(same fake, same stores) under cProfile for the breakdown of the cache-on difference:
per function, cache-on minus cache-off cost per request, profiling only the timed rounds
(:mod:`bench.profiled_relay`).
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from bench.cache import bench_config, translated
from bench.identity import cursor_history, recorded_request
from bench.servers import (
    KEY,
    TOKEN,
    added_time,
    enqueue,
    events_to_first_delta,
    load_average,
    process,
    profile_costs,
    relay_env,
    relay_profile,
    stream_once,
)

SIZES = (201, 1000)
BYTES_AT_201 = 108_000  # the history: 201 messages, 108 KB of JSON
# The cache's own share of the time to first token (on - off, net of the upstream's
# extra work on the replaying body), issue 29.
TARGETS_MS = {201: 2.0, 1000: 6.0}
MODES = ("direct", "direct_replay", "relay", "relay_cache")
DELTAS = 60  # the first token is what is timed; the rest only has to stream like a model
PACE_MS = 0.5
WARMUP_ROUNDS = 2
PROFILE_ROUNDS = 20
FINAL_USER = "Now run the type checker again and fix whatever it still reports."
CONTINUITY = re.compile(r"continuity: replayed=(\d+) intact=(\d+) misplaced=(\d+)")
RELAY_HEADERS = {"Authorization": f"Bearer {TOKEN}"}


def conversation(count: int) -> list[dict[str, Any]]:
    """``count`` messages of the recordings' mix, ``BYTES_AT_201`` scaled to ``count``
    (the tool results clipped to a common length), the last one a user message."""
    history = [*cursor_history(count - 1), {"role": "user", "content": FINAL_USER}]
    target = BYTES_AT_201 * count // 201

    def clipped(cap: int) -> list[dict[str, Any]]:
        return [{**m, "content": m["content"][:cap]} if m["role"] == "tool" else m
                for m in history]  # fmt: skip

    low, high = 0, max(len(m["content"]) for m in history if m["role"] == "tool")
    while low < high:  # the largest cap within the target
        middle = (low + high + 1) // 2
        if len(json.dumps(clipped(middle))) <= target:
            low = middle
        else:
            high = middle - 1
    return clipped(low)


def answer_script(message: dict[str, Any]) -> dict[str, Any]:
    """A fake script whose answer, through the relay, is ``message``."""
    output: list[dict[str, Any]] = [{"type": "reasoning", "summary": []}]
    if message.get("content"):
        output.append({"type": "message", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call["function"]
        output.append({"type": "function_call", "name": function["name"],
                       "arguments": function["arguments"], "call_id": call["id"]})  # fmt: skip
    return {"output": output}


def post(conn: http.client.HTTPConnection, body: dict[str, Any]) -> dict[str, Any]:
    conn.request("POST", "/v1/chat/completions", json.dumps(body).encode(),
                 {**RELAY_HEADERS, "Content-Type": "application/json"})  # fmt: skip
    resp = conn.getresponse()
    data = resp.read()
    assert resp.status == 200, data[:300]
    return json.loads(data)  # type: ignore[no-any-return]


def grow(port: int, fake_port: int, template: dict[str, Any], history: list[dict[str, Any]]) -> int:
    """Send every assistant turn of ``history`` through the relay at ``port`` as the
    conversation grew; check each answer is the history's message. Returns the turns."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    turns = 0
    for position, message in enumerate(history):
        if message["role"] != "assistant":
            continue
        enqueue(fake_port, answer_script(message))
        got = post(conn, {**template, "messages": history[:position], "stream": False})
        answer = got["choices"][0]["message"]
        calls = [(c["id"], c["function"]["name"], c["function"]["arguments"])
                 for c in answer.get("tool_calls") or []]  # fmt: skip
        want = [(c["id"], c["function"]["name"], c["function"]["arguments"])
                for c in message.get("tool_calls") or []]  # fmt: skip
        assert (answer.get("content") or None, calls) == (message.get("content") or None, want)
        turns += 1
    conn.close()
    return turns


def continuity(conn: http.client.HTTPConnection, template: dict[str, Any],
               history: list[dict[str, Any]]) -> dict[str, int]:  # fmt: skip
    """The fake's continuity probe for this history through a relay (its default reply,
    with no script queued): the reasoning items replayed, and how many are intact."""
    text = post(conn, {**template, "messages": history, "stream": False})
    match = CONTINUITY.search(text["choices"][0]["message"]["content"])
    assert match, text
    replayed, intact, misplaced = map(int, match.groups())
    return {"replayed": replayed, "intact": intact, "misplaced": misplaced}


@contextmanager
def relays(env: dict[str, str], fake_port: int, data: dict[str, str],
           profiles: dict[str, Path] | None = None) -> Iterator[dict[str, tuple[int, int]]]:  # fmt: skip
    """A cache-off and a cache-on relay as (port, pid), under :mod:`bench.profiled_relay`
    when ``profiles`` names their stats files."""
    with ExitStack() as stack:
        found = {}
        for mode, cache in (("relay", False), ("relay_cache", True)):
            cmd = [sys.executable, "-m", "relay", "serve"] if profiles is None else [
                sys.executable, "-m", "bench.profiled_relay", str(profiles[mode])
            ]  # fmt: skip
            pids: list[int] = []
            port = stack.enter_context(process(
                cmd, relay_env(env, fake_port, data[mode], cache=cache), "relay listening",
                pids,
            ))  # fmt: skip
            found[mode] = (port, pids[0])
        yield found


def run_conversations(
    sizes: tuple[int, ...] = SIZES, *, iterations: int = 30, keep: Path | None = None
) -> dict[str, Any]:
    """For each size: grow the conversation, then ``iterations`` timed rounds (after
    WARMUP_ROUNDS) of direct, cache off, cache on, then the profiled rounds; with
    ``keep``, the cache-on relay's cProfile stats are kept there
    (``relay-cache-<size>.prof``)."""
    base_env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    template = {key: value for key, value in recorded_request().items() if key != "messages"}
    off_config = dataclasses.replace(bench_config(Path(".")), reasoning_cache_enabled=False)
    rows = []
    fake = [sys.executable, "-m", "fakeupstream", "--port", "0", "--max-records", "1"]
    with process(fake, base_env,
                 "fakeupstream listening") as fake_port:  # fmt: skip
        for size in sizes:
            # Every earlier block replayed: the plan may be as long as the conversation
            # (the default bound, 256 records, would cut the 1,000-message one short).
            env = {**base_env, "REASONING_CACHE_MAX_PLAN_RECORDS": str(max(size, 256))}
            history = conversation(size)
            body = {**template, "messages": history, "stream": True}
            direct_body = {**translated(off_config, body).upstream_body, "stream": True}
            with tempfile.TemporaryDirectory() as off, tempfile.TemporaryDirectory() as on:
                data = {"relay": off, "relay_cache": on}
                with process([sys.executable, "-m", "relay", "serve"],
                             relay_env(env, fake_port, on, cache=True),
                             "relay listening") as warm_port:  # fmt: skip
                    started = time.perf_counter()
                    turns = grow(warm_port, fake_port, template, history)
                grown = time.perf_counter()
                load = [load_average()]
                with relays(env, fake_port, data) as servers:
                    row = timed_rounds(fake_port, servers, body, direct_body, template,
                                       iterations)  # fmt: skip
                load.append(load_average())
                # Every assistant turn's reasoning replayed, and only those.
                assert row["continuity"]["before"]["relay_cache"]["replayed"] == turns, row
                timed = time.perf_counter()
                with tempfile.TemporaryDirectory() as scratch:
                    profiles = {mode: Path(scratch) / f"{mode}.prof" for mode in data}
                    with relays(env, fake_port, data, profiles) as servers:
                        profiled_rounds(fake_port, servers, body)
                    difference = profile_difference(profiles, PROFILE_ROUNDS)
                    if keep is not None:
                        keep.mkdir(parents=True, exist_ok=True)
                        shutil.copy(profiles["relay_cache"], keep / f"relay-cache-{size}.prof")
                phases = {"grow_s": grown - started, "rounds_s": timed - grown,
                          "profile_s": time.perf_counter() - timed}  # fmt: skip
            rows.append({
                "messages": size, "history_bytes": len(json.dumps(history)),
                "body_bytes": len(json.dumps(body)),
                "assistant_turns": turns, **row, "target_ms": TARGETS_MS.get(size),
                "load_average": load,
                "profile": difference, "phases": phases,
            })  # fmt: skip
    return {"rows": rows, "iterations": iterations, "deltas": DELTAS, "pace_ms": PACE_MS,
            "profile_rounds": PROFILE_ROUNDS}  # fmt: skip


def paced_script(leading: int) -> dict[str, Any]:
    return {
        "output": [{"type": "reasoning", "summary": ["plan"]},
                   {"type": "message", "text": "x" * DELTAS}],
        "delta_size": 1,
        "toxics": {"latency_ms": PACE_MS, "latency_after_events": leading},
    }  # fmt: skip


def timed_rounds(fake_port: int, servers: dict[str, tuple[int, int]], body: dict[str, Any],
                 direct_body: dict[str, Any], template: dict[str, Any],
                 iterations: int) -> dict[str, Any]:  # fmt: skip
    """Rounds of the four modes back to back (direct; direct with the cache-on relay's
    upstream body; cache off; cache on), between two continuity checks."""
    ports = {"direct": fake_port, **{mode: port for mode, (port, _) in servers.items()}}
    conns = {mode: http.client.HTTPConnection("127.0.0.1", port, timeout=120)
             for mode, port in ports.items()}  # fmt: skip
    direct_headers = {"Authorization": f"Bearer {KEY}"}
    history = body["messages"]
    before = {mode: continuity(conns[mode], template, history) for mode in servers}
    # What the cache-on relay sent for the last probe: the body with the replayed items.
    replay_body = {**last_upstream_body(fake_port), "stream": True}
    enqueue(fake_port, paced_script(0))
    leading = events_to_first_delta(conns["direct"], direct_body, direct_headers)
    script = paced_script(leading)
    ttft: dict[str, list[float]] = {mode: [] for mode in MODES}
    for i in range(iterations + WARMUP_ROUNDS):
        for mode in MODES:
            enqueue(fake_port, script)
            if mode.startswith("direct"):
                sample = stream_once(conns["direct"], "/v1/responses",
                                     direct_body if mode == "direct" else replay_body,
                                     direct_headers, lambda f: b"output_text.delta" in f)  # fmt: skip
            else:
                sample = stream_once(conns[mode], "/v1/chat/completions", body, RELAY_HEADERS,
                                     lambda f: b'"content":"x' in f)  # fmt: skip
            if i >= WARMUP_ROUNDS:
                ttft[mode].append(sample[0])
    after = {mode: continuity(conns[mode], template, history) for mode in servers}
    for probe in (before, after):  # else the row would time a miss, not the replay path
        assert probe["relay"]["replayed"] == 0, probe
        cached = probe["relay_cache"]
        assert cached["replayed"] > 0, probe
        assert cached["intact"] == cached["replayed"], probe
    for conn in conns.values():
        conn.close()
    return {
        **{f"{mode}_s": statistics.median(ttft[mode]) for mode in MODES},
        "on_minus_off_s": statistics.median(
            on - off for on, off in zip(ttft["relay_cache"], ttft["relay"], strict=True)
        ),
        # The relay's own share: on - off less what the larger body costs the upstream.
        "relay_share_s": statistics.median(
            (on - off) - (replay - direct) for on, off, replay, direct in zip(
                ttft["relay_cache"], ttft["relay"], ttft["direct_replay"], ttft["direct"],
                strict=True,
            )
        ),
        # The fake reading the replayed items is inside "added, on"; this is without it.
        "added": {**added_time(ttft), "relay_cache_net_s": statistics.median(
            on - replay for on, replay in zip(ttft["relay_cache"], ttft["direct_replay"],
                                              strict=True)
        )},
        "upstream_bytes": {"relay": len(json.dumps(direct_body)),
                           "relay_cache": len(json.dumps(replay_body))},
        "continuity": {"before": before, "after": after}, "unpaced_leading_events": leading,
    }  # fmt: skip


def last_upstream_body(fake_port: int) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", fake_port, timeout=60)
    conn.request("GET", "/__fake/requests")
    records = json.loads(conn.getresponse().read())
    conn.close()
    return records[-1]["body"]  # type: ignore[no-any-return]


def profiled_rounds(fake_port: int, servers: dict[str, tuple[int, int]],
                    body: dict[str, Any]) -> None:  # fmt: skip
    """WARMUP_ROUNDS unprofiled, then PROFILE_ROUNDS profiled requests to each relay."""
    conns = {mode: http.client.HTTPConnection("127.0.0.1", port, timeout=120)
             for mode, (port, _) in servers.items()}  # fmt: skip
    script = paced_script(0)
    for i in range(WARMUP_ROUNDS + PROFILE_ROUNDS):
        if i == WARMUP_ROUNDS:
            for _, pid in servers.values():
                os.kill(pid, signal.SIGUSR1)
        for conn in conns.values():
            enqueue(fake_port, script)
            stream_once(conn, "/v1/chat/completions", body, RELAY_HEADERS,
                        lambda f: b'"content":"x' in f)  # fmt: skip
    for _, pid in servers.values():
        os.kill(pid, signal.SIGUSR2)
    for conn in conns.values():
        conn.close()


def profile_difference(profiles: dict[str, Path], requests: int, *,
                       top: int = 12) -> dict[str, Any]:  # fmt: skip
    """Per function, cache-on minus cache-off (own ms, cumulative ms) per request: the
    top ``top`` of the relay's own functions by cumulative difference, the top ``top`` of
    all functions by own difference, and the total own difference; and what is left, the
    cache-on relay's own profile: its relay functions by cumulative time and all its
    functions by own time (the fake runs in another process, so none of it is here)."""
    on = profile_costs(profiles["relay_cache"], requests)
    off = profile_costs(profiles["relay"], requests)
    rows: list[dict[str, Any]] = [
        {"function": label,
         "own_ms": on.get(label, (0.0, 0.0))[0] - off.get(label, (0.0, 0.0))[0],
         "cumulative_ms": on.get(label, (0.0, 0.0))[1] - off.get(label, (0.0, 0.0))[1],
         "on_cumulative_ms": on.get(label, (0.0, 0.0))[1]}
        for label in on.keys() | off.keys()
    ]  # fmt: skip
    relay_code = [row for row in rows if row["function"].startswith("relay/")]
    by_cumulative = sorted(relay_code, key=lambda row: row["cumulative_ms"], reverse=True)
    by_own = sorted(rows, key=lambda row: row["own_ms"], reverse=True)
    return {
        "total_own_ms": sum(row["own_ms"] for row in rows),
        "on_total_own_ms": sum(own for own, _ in on.values()),
        "off_total_own_ms": sum(own for own, _ in off.values()),
        "by_cumulative": by_cumulative[:top], "by_own": by_own[:top],
        # What is left: the cache-on relay's whole cost per request, not a difference.
        "on_relay_by_cumulative": relay_profile(
            profiles["relay_cache"], requests, top=15, by="cumulative_ms", relay_code=True
        ),
        "on_by_own": relay_profile(profiles["relay_cache"], requests, top=15),
    }  # fmt: skip
