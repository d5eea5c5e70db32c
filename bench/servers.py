"""The servers the relay benches run against and the client that times them.

The fake upstream and the relays run as real subprocesses (as in production); the client
is a raw streaming HTTP client in the bench process that keeps one connection to each
server alive, as Cursor does.
"""

from __future__ import annotations

import http.client
import json
import os
import pstats
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.identity import paired_ratio

TOKEN = "bench-relay-token-0123456789"
KEY = "sk-bench"


@contextmanager
def process(
    args: list[str], env: dict[str, str], banner: str, pids: list[int] | None = None
) -> Iterator[int]:
    """Run ``args`` until the block ends; yields the port its ``banner`` line names (and
    appends its pid to ``pids``)."""
    proc = subprocess.Popen(
        args,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    if pids is not None:
        pids.append(proc.pid)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(banner):
                port = int(line.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
                break
        else:
            raise RuntimeError(f"{' '.join(args[1:])} exited before printing its address")
        yield port
    finally:
        proc.terminate()
        proc.wait(30)


Sample = tuple[float, float, int]  # seconds to first content, total seconds, content frames


def load_average() -> float:
    """The machine's 1-minute load average, recorded beside each timed section: the CPU
    is shared, and a row measured at load 3 on 2 cores is not one measured idle."""
    return os.getloadavg()[0]


def paired(times: dict[str, list[float]], mode: str, base: str) -> float:
    """The median of the rounds' own ``mode - base`` (seconds): each round's contestant
    against the same round's base, so the machine's drift between rounds cancels."""
    return statistics.median(t - b for t, b in zip(times[mode], times[base], strict=True))


def added_time(times: dict[str, list[float]]) -> dict[str, float]:
    """What a relay adds to ``direct``, from paired rounds of ``direct``, ``relay`` (cache
    off) and ``relay_cache`` (cache on): the median of the rounds' differences (seconds)
    and the median of their ratios, so each round's relay is compared with its own direct
    request and the machine's drift between rounds cancels."""
    return {
        **{f"{mode}_s": paired(times, mode, "direct") for mode in ("relay", "relay_cache")},
        **{f"{mode}_ratio": paired_ratio(times, [mode], "direct")
           for mode in ("relay", "relay_cache")},
    }  # fmt: skip


def stream_once(
    conn: http.client.HTTPConnection,
    path: str,
    body: dict[str, Any],
    headers: dict[str, str],
    is_content: Callable[[bytes], bool],
) -> Sample:
    """(seconds to first content frame, total seconds, content frames) over ``conn``, a
    connection the caller keeps alive between requests, as Cursor does. Raw HTTP, no SDK:
    the first time is taken when the read that completes the first SSE frame carrying
    content returns (a frame is a few hundred bytes, one read), so it is the time to the
    first content byte plus at most that frame's own transfer."""
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
    return (first if first is not None else total), total, frames


def enqueue(port: int, script: dict[str, Any]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(
        "POST", "/__fake/scripts", json.dumps(script), {"Content-Type": "application/json"}
    )
    assert conn.getresponse().status == 200
    conn.close()


def relay_env(env: dict[str, str], fake_port: int, data: str, *, cache: bool) -> dict[str, str]:
    return {
        **env, "RELAY_PORT": "0", "RELAY_TOKEN": TOKEN, "RELAY_DATA_DIR": data,
        "OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": f"http://127.0.0.1:{fake_port}/v1",
        "RELAY_LOG_LEVEL": "warning", "REASONING_CACHE_ENABLED": "1" if cache else "0",
    }  # fmt: skip


def events_to_first_delta(
    conn: http.client.HTTPConnection, body: dict[str, Any], headers: dict[str, str]
) -> int:
    """How many events the fake sends up to and including the first text delta."""
    conn.request("POST", "/v1/responses", json.dumps(body).encode(),
                 {**headers, "Content-Type": "application/json"})  # fmt: skip
    frames = conn.getresponse().read().split(b"\n\n")
    return next(n for n, frame in enumerate(frames, 1) if b"output_text.delta" in frame)


def profile_costs(path: Path, requests: int) -> dict[str, tuple[float, float]]:
    """Each function of a relay's cProfile stats as (own ms, cumulative ms) per request,
    idle waits left out (startup, if profiled, is amortized over the requests)."""
    stats = pstats.Stats(str(path))
    costs = {}
    for (file, line, name), (_, _, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        if "select.epoll" in name or "selectors.py" in file:
            continue  # waiting for the network, not work
        where = "relay/" + file.rsplit("/relay/", 1)[1] if "/relay/" in file else Path(file).name
        label = f"{where}:{line}({name})" if line else name
        costs[label] = (own / requests * 1000, cumulative / requests * 1000)
    return costs


def relay_profile(
    path: Path, requests: int, *, top: int = 15, by: str = "own_ms", relay_code: bool = False
) -> list[dict[str, Any]]:
    """Top functions of a profiled relay per request, by ``by`` (``own_ms`` or
    ``cumulative_ms``); with ``relay_code``, only the relay's own functions (``relay/``),
    whose cumulative time includes the library code they call."""
    rows: list[dict[str, Any]] = [
        {"function": label, "own_ms": own, "cumulative_ms": cumulative}
        for label, (own, cumulative) in profile_costs(path, requests).items()
        if not relay_code or label.startswith("relay/")
    ]
    rows.sort(key=lambda row: row[by], reverse=True)
    return rows[:top]
