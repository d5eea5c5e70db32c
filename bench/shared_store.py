"""The shared PostgreSQL store next to the SQLite file (issue 31): time to first token at a
201-message conversation with every earlier block replayed, the two stores in paired
rounds; and the throughput of N concurrent conversations against one relay and against
two relays on one PostgreSQL database (each conversation's turns alternating between
them, as a round-robin balancer sends them).

The database is a throwaway cluster (``tests/support/pg_cluster.py``, Unix socket only);
the relays and the fake upstream run as real subprocesses. Without PostgreSQL's server
programs the section is skipped, naming what is missing.
"""

from __future__ import annotations

import http.client
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

from bench.conversation import (
    RELAY_HEADERS,
    WARMUP_ROUNDS,
    continuity,
    conversation,
    grow,
    paced_script,
    post,
)
from bench.identity import recorded_request
from bench.servers import enqueue, load_average, process, relay_env, stream_once
from tests.support.pg_cluster import PgCluster, bin_dir, unavailable

KINDS = ("sqlite", "postgresql")
CONVERSATION = 201
TURNS = 6  # per conversation in the throughput rows


def _relay(stack: ExitStack, env: dict[str, str], fake_port: int, data: str) -> int:
    return stack.enter_context(process(
        [sys.executable, "-m", "relay", "serve"], relay_env(env, fake_port, data, cache=True),
        "relay listening",
    ))  # fmt: skip


def run_shared_store(iterations: int = 20, concurrency: int = 8) -> dict[str, Any]:
    """Both rows; ``{"skipped": why}`` without PostgreSQL."""
    missing = unavailable()
    if missing is not None:
        return {"skipped": missing}
    programs = bin_dir()
    assert programs is not None
    cluster = PgCluster(programs)
    try:
        cluster.start()
        with ExitStack() as stack:
            base = {**os.environ, "PYTHONUNBUFFERED": "1",
                    "REASONING_CACHE_MAX_PLAN_RECORDS": "256"}  # fmt: skip
            fake_port = stack.enter_context(process(
                [sys.executable, "-m", "fakeupstream", "--port", "0", "--max-records", "1"],
                base, "fakeupstream listening",
            ))  # fmt: skip
            template = {k: v for k, v in recorded_request().items() if k != "messages"}
            ttft = _ttft_rows(stack, base, fake_port, cluster, template, iterations)
            throughput = _throughput_rows(stack, base, fake_port, cluster, template, concurrency)
        return {"ttft": ttft, "throughput": throughput, "iterations": iterations,
                "concurrency": concurrency, "turns": TURNS}  # fmt: skip
    finally:
        cluster.destroy()


def _ttft_rows(
    stack: ExitStack, base: dict[str, str], fake_port: int, cluster: PgCluster,
    template: dict[str, Any], iterations: int,
) -> dict[str, Any]:  # fmt: skip
    history = conversation(CONVERSATION)
    ports = {}
    for kind in KINDS:
        env = dict(base)
        if kind == "postgresql":
            env["REASONING_CACHE_URL"] = cluster.url(cluster.create_database())
        ports[kind] = _relay(
            stack, env, fake_port, stack.enter_context(tempfile.TemporaryDirectory())
        )
        grow(ports[kind], fake_port, template, history)
    conns = {k: http.client.HTTPConnection("127.0.0.1", p, timeout=120) for k, p in ports.items()}
    probe = {kind: continuity(conns[kind], template, history) for kind in KINDS}
    body = {**template, "messages": history, "stream": True}
    script = paced_script(0)
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    load = [load_average()]
    for i in range(iterations + WARMUP_ROUNDS):
        for kind in KINDS:  # paired: machine noise hits both alike
            enqueue(fake_port, script)
            first, _total, _frames = stream_once(
                conns[kind], "/v1/chat/completions", body, RELAY_HEADERS,
                lambda f: b'"content":"x' in f,
            )  # fmt: skip
            if i >= WARMUP_ROUNDS:
                times[kind].append(first)
    load.append(load_average())
    for conn in conns.values():
        conn.close()
    return {
        **{f"{kind}_s": statistics.median(times[kind]) for kind in KINDS},
        "postgresql_minus_sqlite_s": statistics.median(
            pg - lite for pg, lite in zip(times["postgresql"], times["sqlite"], strict=True)
        ),
        "continuity": probe, "messages": CONVERSATION, "load_average": load,
    }  # fmt: skip


def _throughput_rows(
    stack: ExitStack, base: dict[str, str], fake_port: int, cluster: PgCluster,
    template: dict[str, Any], concurrency: int,
) -> dict[str, Any]:  # fmt: skip
    rows = {}
    for relays in (1, 2):
        env = {**base, "REASONING_CACHE_URL": cluster.url(cluster.create_database())}
        ports = [_relay(stack, env, fake_port, stack.enter_context(tempfile.TemporaryDirectory()))
                 for _ in range(relays)]  # fmt: skip

        def talk(n: int, ports: list[int] = ports) -> int:
            conns = [http.client.HTTPConnection("127.0.0.1", p, timeout=120) for p in ports]
            messages: list[dict[str, Any]] = [{"role": "user", "content": f"conversation {n}"}]
            replayed = 0
            for turn in range(TURNS):
                answer = post(conns[turn % len(conns)], {**template, "messages": messages,
                                                        "stream": False})  # fmt: skip
                text = answer["choices"][0]["message"]["content"]
                replayed = int(text.split("replayed=", 1)[1].split()[0])
                messages += [{"role": "assistant", "content": text},
                             {"role": "user", "content": f"turn {turn}"}]  # fmt: skip
            for conn in conns:
                conn.close()
            return replayed

        started = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            replayed = list(pool.map(talk, range(concurrency)))
        elapsed = time.perf_counter() - started
        rows[str(relays)] = {
            "requests": concurrency * TURNS, "seconds": elapsed,
            "requests_per_s": concurrency * TURNS / elapsed,
            "last_turn_replayed": sorted(set(replayed)), "load_average": load_average(),
        }  # fmt: skip
    return rows


def shared_store_report(result: dict[str, Any]) -> list[str]:
    """Markdown tables for the section."""
    if "skipped" in result:
        return [f"Shared PostgreSQL store: skipped ({result['skipped']})"]
    ttft = result["ttft"]
    lines = [
        f"Time to first token at {ttft['messages']} messages, every earlier block replayed "
        f"({result['iterations']} paired rounds, medians)",
        "",
        "| store | ttft (ms) |",
        "|---|---|",
        f"| SQLite file | {ttft['sqlite_s'] * 1000:.2f} |",
        f"| PostgreSQL (shared) | {ttft['postgresql_s'] * 1000:.2f} |",
        f"| PostgreSQL - SQLite (paired) | {ttft['postgresql_minus_sqlite_s'] * 1000:+.2f} |",
        "",
        f"{result['concurrency']} concurrent conversations of {result['turns']} turns, "
        "each turn's reasoning replayed",
        "",
        "| relays on one PostgreSQL | requests | seconds | requests/s |",
        "|---|---|---|---|",
    ]
    for relays, row in result["throughput"].items():
        lines.append(f"| {relays} | {row['requests']} | {row['seconds']:.2f} | "
                     f"{row['requests_per_s']:.1f} |")  # fmt: skip
    return lines
