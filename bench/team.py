"""``python -m bench.team`` (``nox -s bench`` runs it after the main bench): team deployment
next to the default, measured in one run on one machine.

1. Time to first token at a 201-message Cursor conversation with every earlier block
   replayed, a cache-on relay on its SQLite file next to one on PostgreSQL (a throwaway
   cluster: tests/support/pg_cluster.py), in paired rounds (each round times one request
   to each, so machine noise hits both alike): medians and the median of the rounds'
   differences. Both conversations are grown through their relay first, and the fake's
   continuity probe shows that every assistant turn is replayed, before and after.
2. Throughput: N concurrent conversations of T turns each (small histories; the fake's
   default answer), against one relay vs two behind haproxy (contrib/team/haproxy.cfg),
   both on the PostgreSQL store: turns per second. On a 2-core machine that also runs the
   clients, the fake, PostgreSQL and haproxy, the second instance has little idle CPU to
   use; the row shows what a second instance costs or earns there.

Markdown on stdout, JSON in bench-results/team.json; nothing here asserts a time limit.
PostgreSQL or haproxy missing: the section says so and is skipped.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

from bench.cache import bench_config, translated
from bench.conversation import (
    RELAY_HEADERS,
    continuity,
    conversation,
    grow,
    paced_script,
    post,
)
from bench.identity import recorded_request
from bench.servers import (
    KEY,
    enqueue,
    events_to_first_delta,
    load_average,
    process,
    relay_env,
    stream_once,
)
from tests.support.haproxy import Haproxy, program
from tests.support.pg_cluster import PgCluster, bin_dir, unavailable

MESSAGES = 201
STORES = ("sqlite", "postgresql")
WARMUP_ROUNDS = 2
CONVERSATIONS = 8
TURNS = 4


def relay(stack: ExitStack, env: dict[str, str], fake_port: int, **extra: str) -> int:
    """A cache-on relay (its data in a temporary directory) for the life of ``stack``."""
    data = stack.enter_context(tempfile.TemporaryDirectory())
    settings = {**relay_env(env, fake_port, data, cache=True), **extra}
    return stack.enter_context(
        process([sys.executable, "-m", "relay", "serve"], settings, "relay listening")
    )


def ttft_rows(env: dict[str, str], fake_port: int, url: str, iterations: int) -> dict[str, Any]:
    """Section 1: SQLite vs PostgreSQL, time to first token at MESSAGES messages."""
    template = {key: value for key, value in recorded_request().items() if key != "messages"}
    history = conversation(MESSAGES)
    body = {**template, "messages": history, "stream": True}
    off = dataclasses.replace(bench_config(Path(".")), reasoning_cache_enabled=False)
    direct_body = {**translated(off, body).upstream_body, "stream": True}
    with ExitStack() as stack:
        ports = {
            "sqlite": relay(stack, env, fake_port),
            "postgresql": relay(stack, env, fake_port, REASONING_CACHE_URL=url),
        }
        turns = {store: grow(port, fake_port, template, history) for store, port in ports.items()}
        conns = {store: http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                 for store, port in ports.items()}  # fmt: skip
        direct = http.client.HTTPConnection("127.0.0.1", fake_port, timeout=120)
        before = {store: continuity(conns[store], template, history) for store in STORES}
        enqueue(fake_port, paced_script(0))
        leading = events_to_first_delta(direct, direct_body, {"Authorization": f"Bearer {KEY}"})
        script = paced_script(leading)
        times: dict[str, list[float]] = {store: [] for store in STORES}
        load = [load_average()]
        for i in range(iterations + WARMUP_ROUNDS):
            for store in STORES:
                enqueue(fake_port, script)
                sample = stream_once(conns[store], "/v1/chat/completions", body, RELAY_HEADERS,
                                     lambda f: b'"content":"x' in f)  # fmt: skip
                if i >= WARMUP_ROUNDS:
                    times[store].append(sample[0])
        load.append(load_average())
        after = {store: continuity(conns[store], template, history) for store in STORES}
        for conn in (*conns.values(), direct):
            conn.close()
    for probe in (before, after):  # else the rows would time a miss, not the replay path
        for store in STORES:
            assert probe[store]["replayed"] == probe[store]["intact"] == turns[store], probe
    return {
        "messages": MESSAGES, "iterations": iterations, "assistant_turns": turns,
        "ttft_ms": {store: statistics.median(times[store]) * 1000 for store in STORES},
        "postgresql_minus_sqlite_ms": statistics.median(
            (pg - lite) * 1000
            for pg, lite in zip(times["postgresql"], times["sqlite"], strict=True)
        ),
        "load_average": load,
    }  # fmt: skip


def converse(base: str, name: str) -> int:
    """One conversation of TURNS turns through ``base``; the turns it completed."""
    host, port = base.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    messages = [{"role": "user", "content": f"conversation {name}"}]
    for turn in range(TURNS):
        answer = post(conn, {"model": "gpt-5", "messages": messages, "stream": False})
        messages += [answer["choices"][0]["message"],
                     {"role": "user", "content": f"turn {turn + 1}"}]  # fmt: skip
    conn.close()
    return TURNS


def throughput_rows(env: dict[str, str], fake_port: int, cluster: PgCluster) -> dict[str, Any]:
    """Section 2: N concurrent conversations against one relay vs two behind haproxy."""
    rows: dict[str, Any] = {}
    for instances in (1, 2):
        url = cluster.url(cluster.create_database())  # a fresh store each time
        with ExitStack() as stack, tempfile.TemporaryDirectory() as scratch:
            bases = [
                f"http://127.0.0.1:{relay(stack, env, fake_port, REASONING_CACHE_URL=url)}/v1"
                for _ in range(instances)
            ]
            if instances > 1:
                proxy = Haproxy([(f"r{k}", base) for k, base in enumerate(bases, 1)],
                                Path(scratch))  # fmt: skip
                stack.callback(proxy.stop)
                base = proxy.base
            else:
                base = bases[0]
            load = [load_average()]
            started = time.perf_counter()
            with ThreadPoolExecutor(CONVERSATIONS) as pool:
                done = sum(pool.map(partial(converse, base), map(str, range(CONVERSATIONS))))
            elapsed = time.perf_counter() - started
            load.append(load_average())
        rows[str(instances)] = {"turns": done, "seconds": elapsed,
                                "turns_per_s": done / elapsed, "load_average": load}  # fmt: skip
    return rows


def report(result: dict[str, Any]) -> str:
    lines = []
    if (ttft := result.get("ttft")) is not None:
        lines += [
            f"\n## Team deployment: time to first token at {ttft['messages']} messages, every "
            f"earlier block replayed ({ttft['iterations']} paired rounds, medians)\n",
            "| store | ttft (ms) |",
            "|---|---|",
            *(f"| {store} | {ttft['ttft_ms'][store]:.1f} |" for store in STORES),
            f"| postgresql - sqlite (paired) | {ttft['postgresql_minus_sqlite_ms']:+.1f} |",
            f"\nload average {ttft['load_average'][0]:.1f} -> {ttft['load_average'][1]:.1f}",
        ]
    if (rows := result.get("throughput")) is not None:
        lines += [
            f"\n## Team deployment: {CONVERSATIONS} concurrent conversations of {TURNS} turns, "
            "PostgreSQL store\n",
            "| instances | turns | seconds | turns/s | load |", "|---|---|---|---|---|",
            *(f"| {n} | {row['turns']} | {row['seconds']:.2f} | {row['turns_per_s']:.1f} | "
              f"{row['load_average'][0]:.1f} -> {row['load_average'][1]:.1f} |"
              for n, row in rows.items()),
        ]  # fmt: skip
    lines += [f"\n{note}" for note in result.get("skipped", [])]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.team", description=__doc__)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--out", type=Path, default=Path("bench-results/team.json"))
    args = parser.parse_args()
    result: dict[str, Any] = {"skipped": []}
    if (reason := unavailable()) is not None:
        result["skipped"].append(f"skipped (no PostgreSQL): {reason}")
        print(report(result))
        return
    programs = bin_dir()
    assert programs is not None
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    fake = [sys.executable, "-m", "fakeupstream", "--port", "0", "--max-records", "1"]
    cluster = PgCluster(programs)
    try:
        cluster.start()
        with process(fake, env, "fakeupstream listening") as fake_port:
            result["ttft"] = ttft_rows(env, fake_port, cluster.url(cluster.create_database()),
                                       args.iterations)  # fmt: skip
            if program() is None:
                result["skipped"].append("throughput skipped: haproxy not found (Debian "
                                         "package 'haproxy')")  # fmt: skip
            else:
                result["throughput"] = throughput_rows(env, fake_port, cluster)
    finally:
        cluster.destroy()
    print(report(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"\nwritten: {args.out}")


if __name__ == "__main__":
    main()
