"""Added time to first token, contestant by contestant, on one fake upstream.

Issue 29 asks how close the relay's added time comes to its floor and to LiteLLM's
("about 0.1x of LiteLLM's added cost measured the same way"). Each round sends the same
request through every contestant, at a small history and at the 201-message conversation
(every earlier block replayed by the cache-on relay, grown as in :mod:`bench.conversation`):

- ``direct``: the Responses request straight to the fake;
- ``direct_replay``: the same, with the body the cache-on relay sent (its replayed items),
  so the upstream's own extra work on the larger body can be netted out;
- ``floor``: the direct request through :mod:`bench.floor_proxy`, a TCP pump on the
  relay's event loop: what one more Python process in the path costs, below which no
  relay can go;
- ``relay`` / ``relay_cache``: the Chat request through the relay, cache off / on;
- ``litellm`` (with ``--litellm PATH``): the Chat request through LiteLLM's bridge
  (:mod:`bench.litellm_bridge`).

Rounds as elsewhere (paced stream, raw HTTP over kept-alive connections, medians), the
order rotating each round, so no contestant always follows another or serves two requests
back to back (a request arriving while a server still finishes its previous answer would
be charged for that work). Every figure is a median of the rounds' own differences: added
= contestant - direct; net = cache on - direct_replay; above the floor = relay - floor
(cache on: its net less the floor's added time).
"""

from __future__ import annotations

import dataclasses
import http.client
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.cache import bench_config, translated
from bench.conversation import RELAY_HEADERS, conversation, grow, last_upstream_body, paced_script
from bench.litellm_bridge import litellm_proxy
from bench.servers import (
    KEY,
    enqueue,
    events_to_first_delta,
    load_average,
    paired,
    process,
    relay_env,
    stream_once,
)

MODES = ("direct", "direct_replay", "floor", "relay", "relay_cache")
TARGET_RATIO = 0.1  # issue 29: the relay's added cost, cache on, about 0.1x LiteLLM's
SIZES = ("small", "201")
WARMUP_ROUNDS = 3
PLAN_RECORDS = "256"  # the default bound: the 201-message conversation fits in full


def bodies(size: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Chat body the relays (and LiteLLM) get, and the Responses body sent direct."""
    if size == "small":
        messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    else:
        messages = conversation(int(size))
    chat = {"model": "gpt-5", "messages": messages, "stream": True}
    off = dataclasses.replace(bench_config(Path(".")), reasoning_cache_enabled=False)
    return chat, {**translated(off, chat).upstream_body, "stream": True}


def run_contestants(iterations: int, litellm: Path | None = None) -> dict[str, Any]:
    """The comparison at each size in :data:`SIZES`; LiteLLM joins when given."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    modes = (*MODES, "litellm") if litellm is not None else MODES
    rows = []
    fake = [sys.executable, "-m", "fakeupstream", "--port", "0", "--max-records", "1"]
    with process(fake, env, "fakeupstream listening") as fake_port:
        for size in SIZES:
            chat, direct = bodies(size)
            with ExitStack() as stack:
                ports = {
                    "direct": fake_port, "direct_replay": fake_port,
                    "floor": stack.enter_context(process(
                        [sys.executable, "-m", "bench.floor_proxy", str(fake_port)], env,
                        "floor listening")),
                    "relay": relay(stack, env, fake_port, cache=False),
                    "relay_cache": relay(stack, env, fake_port, cache=True),
                }  # fmt: skip
                headers = {mode: {"Authorization": f"Bearer {KEY}"} for mode in modes}
                headers["relay"] = headers["relay_cache"] = RELAY_HEADERS
                if litellm is not None:
                    port, key = stack.enter_context(litellm_proxy(litellm, fake_port, "gpt-5"))
                    ports["litellm"], headers["litellm"] = port, {"Authorization": f"Bearer {key}"}
                turns = grow(ports["relay_cache"], fake_port, {"model": "gpt-5"}, chat["messages"])
                replay = replay_body(ports["relay_cache"], fake_port, chat)
                requests = {
                    mode: ("/v1/responses", replay if mode == "direct_replay" else direct)
                    if mode in ("direct", "direct_replay", "floor")
                    else ("/v1/chat/completions", chat) for mode in modes
                }  # fmt: skip
                load = [load_average()]
                times = timed(fake_port, ports, headers, requests, iterations)
                load.append(load_average())
            rows.append(summarize(size, times, turns, load))
    return {"rows": rows, "iterations": iterations, "target_ratio": TARGET_RATIO}


def relay(stack: ExitStack, env: dict[str, str], fake_port: int, *, cache: bool) -> int:
    """A ``relay serve`` on a data directory of its own, for the rest of ``stack``."""
    data = stack.enter_context(tempfile.TemporaryDirectory())
    return stack.enter_context(process(
        [sys.executable, "-m", "relay", "serve"],
        relay_env({**env, "REASONING_CACHE_MAX_PLAN_RECORDS": PLAN_RECORDS}, fake_port, data,
                  cache=cache),
        "relay listening"))  # fmt: skip


def replay_body(port: int, fake_port: int, chat: dict[str, Any]) -> dict[str, Any]:
    """The upstream body the cache-on relay at ``port`` sends for ``chat`` (its replayed
    items spliced in), as the fake received it."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    enqueue(fake_port, paced_script(0))
    stream_once(conn, "/v1/chat/completions", chat, RELAY_HEADERS, lambda f: False)
    conn.close()
    return {**last_upstream_body(fake_port), "stream": True}


def rotation(modes: tuple[str, ...], round_index: int) -> tuple[str, ...]:
    """The order of round ``round_index``: ``modes`` rotated by one each round, so a
    round never starts with the contestant the previous one ended with."""
    shift = round_index % len(modes)
    return (*modes[shift:], *modes[:shift])


def timed(fake_port: int, ports: dict[str, int], headers: dict[str, dict[str, str]],
          requests: dict[str, tuple[str, dict[str, Any]]],
          iterations: int) -> dict[str, list[float]]:  # fmt: skip
    conns = {mode: http.client.HTTPConnection("127.0.0.1", port, timeout=120)
             for mode, port in ports.items()}  # fmt: skip
    enqueue(fake_port, paced_script(0))
    leading = events_to_first_delta(conns["direct"], requests["direct"][1], headers["direct"])
    script = paced_script(leading)
    modes = tuple(requests)
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    for i in range(iterations + WARMUP_ROUNDS):
        for mode in rotation(modes, i):
            enqueue(fake_port, script)
            path, body = requests[mode]
            is_content: Callable[[bytes], bool] = (
                (lambda f: b"output_text.delta" in f) if path == "/v1/responses"
                else (lambda f: b'"content":"x' in f)
            )  # fmt: skip
            sample = stream_once(conns[mode], path, body, headers[mode], is_content)
            if i >= WARMUP_ROUNDS:
                times[mode].append(sample[0])
    for conn in conns.values():
        conn.close()
    return times


def summarize(size: str, times: dict[str, list[float]], turns: int,
              load: list[float]) -> dict[str, Any]:  # fmt: skip
    added = {mode: paired(times, mode, "direct") for mode in times if mode != "direct"}
    row: dict[str, Any] = {
        "history": size, "rounds": len(times["direct"]), "replayed_turns": turns,
        "direct_s": statistics.median(times["direct"]),
        "added_s": added,
        "relay_cache_net_s": paired(times, "relay_cache", "direct_replay"),
        "above_floor_s": {
            "relay": paired(times, "relay", "floor"),
            # net of the replaying body, less the floor's own added time, round by round
            "relay_cache": statistics.median(
                (on - replay) - (floor - direct) for on, replay, floor, direct in zip(
                    times["relay_cache"], times["direct_replay"], times["floor"],
                    times["direct"], strict=True)),
        },
        "load_average": load,
    }  # fmt: skip
    if "litellm" in times:
        row["ratio"] = {mode: added[mode] / added["litellm"] for mode in ("relay", "relay_cache")}
    return row
