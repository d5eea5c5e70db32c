"""``nox -s bench``: the relay against the fake directly, as ratios measured in one run.

Both servers run as real subprocesses (as in production); the client is a raw streaming
HTTP client in this process. Each measurement alternates direct and relayed requests so
machine noise hits both alike, and reports medians. Nothing here asserts a time limit.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TOKEN = "bench-relay-token-0123456789"
KEY = "sk-bench"
DELTAS = 300


@contextmanager
def process(args: list[str], env: dict[str, str], banner: str) -> Iterator[int]:
    proc = subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(banner):
                port = int(line.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
                break
        else:
            raise RuntimeError(f"{args[2]} exited before printing its address")
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def stream_once(port: int, path: str, body: dict[str, Any], headers: dict[str, str],
                is_content: Callable[[bytes], bool]) -> tuple[float, float, int]:
    """(seconds to first content frame, total seconds, content frames)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    payload = json.dumps(body).encode()
    start = time.perf_counter()
    conn.request("POST", path, payload, {**headers, "Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()[:300]
    first = None
    frames = 0
    buffer = b""
    while chunk := resp.read1(65536):
        buffer += chunk
        *complete, buffer = buffer.split(b"\n\n")
        for frame in complete:
            if is_content(frame):
                frames += 1
                if first is None:
                    first = time.perf_counter() - start
    total = time.perf_counter() - start
    conn.close()
    return (first if first is not None else total), total, frames


def run(iterations: int, out: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    script = {"output": [{"type": "message", "text": "x" * DELTAS}], "delta_size": 1}
    small = {"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with tempfile.TemporaryDirectory() as data, process(
        [sys.executable, "-m", "fakeupstream", "--port", "0"], env, "fakeupstream listening"
    ) as fake_port:
        relay_env = {
            **env, "RELAY_PORT": "0", "RELAY_TOKEN": TOKEN, "RELAY_DATA_DIR": data,
            "OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": f"http://127.0.0.1:{fake_port}/v1",
            "RELAY_LOG_LEVEL": "warning",
        }
        with process([sys.executable, "-m", "relay", "serve"], relay_env, "relay listening") as relay_port:
            direct_body = {"model": "gpt-5", "input": [{"role": "user", "content": "hi"}], "stream": True}
            samples: dict[str, list[tuple[float, float, int]]] = {"direct": [], "relay": []}
            for i in range(iterations + 2):
                for mode in ("direct", "relay"):
                    enqueue(fake_port, script)
                    if mode == "direct":
                        sample = stream_once(fake_port, "/v1/responses", direct_body,
                                             {"Authorization": f"Bearer {KEY}"},
                                             lambda f: b"output_text.delta" in f)
                    else:
                        sample = stream_once(relay_port, "/v1/chat/completions", small,
                                             {"Authorization": f"Bearer {TOKEN}"},
                                             lambda f: b'"content":"x' in f)
                    if i >= 2:  # warm-up rounds are discarded
                        samples[mode].append(sample)
    result = summarize(samples)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    return result


def enqueue(port: int, script: dict[str, Any]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", "/__fake/scripts", json.dumps(script), {"Content-Type": "application/json"})
    assert conn.getresponse().status == 200
    conn.close()


def summarize(samples: dict[str, list[tuple[float, float, int]]]) -> dict[str, Any]:
    def med(mode: str, index: int) -> float:
        return statistics.median(s[index] for s in samples[mode])

    rows = {}
    for name, index in (("ttft_s", 0), ("total_s", 1)):
        direct, relay = med("direct", index), med("relay", index)
        rows[name] = {"direct": direct, "relay": relay, "ratio": relay / direct}
    eps = {mode: DELTAS / med(mode, 1) for mode in ("direct", "relay")}
    rows["events_per_s"] = {**eps, "ratio": eps["relay"] / eps["direct"]}
    frames = {s[2] for mode in samples for s in samples[mode]}
    return {"deltas": DELTAS, "iterations": len(samples["relay"]), "content_frames": sorted(frames), "rows": rows}


def print_table(result: dict[str, Any]) -> None:
    print(f"relay vs direct-to-fake, {result['iterations']} runs, {result['deltas']}-delta stream")
    print(f"{'metric':<16}{'direct':>12}{'relay':>12}{'relay/direct':>14}")
    for name, row in result["rows"].items():
        unit = 1 if name == "events_per_s" else 1000
        label = name if unit == 1 else name.removesuffix("_s") + " (ms)"
        print(f"{label:<16}{row['direct'] * unit:>12.2f}{row['relay'] * unit:>12.2f}{row['ratio']:>14.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=15)
    parser.add_argument("--out", type=Path, default=Path("bench-results/bench.json"))
    args = parser.parse_args()
    result = run(args.iterations, args.out)
    print_table(result)
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
