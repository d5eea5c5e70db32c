"""Added time to first token: this relay against LiteLLM's Chat→Responses bridge (opt-in).

Issue 29 states its targets two ways: at most 3 ms (small history) and 4 ms (201
messages) added with the cache on, "about 0.1x of LiteLLM's added cost measured the same
way". This section measures the second in one run, on one fake upstream: the LiteLLM
proxy (``litellm --config``, a deployment ``openai/responses/<model>`` whose
``api_base`` is the fake, so it translates each Chat request to the Responses API as the
relay does), the relay with the cache off, and the relay with the cache on (every earlier
block of the 201-message conversation replayed, grown as in :mod:`bench.conversation`).

Rounds as elsewhere (paced stream, raw HTTP over kept-alive connections, medians), with
one change: the order of the contestants rotates each round, so no contestant always
follows another or serves two requests back to back (a request that arrives while a
server still finishes its previous answer would be charged for that work). Added = the
median of the rounds' (contestant - direct); ratio = relay added / LiteLLM added.

LiteLLM is not a dependency: pass ``--litellm PATH`` (its ``litellm`` executable);
``nox -s bench_litellm`` installs it into a virtualenv of its own and passes it.
"""

from __future__ import annotations

import dataclasses
import http.client
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from bench.cache import bench_config, translated
from bench.conversation import RELAY_HEADERS, conversation, grow, paced_script
from bench.servers import (
    KEY,
    enqueue,
    events_to_first_delta,
    load_average,
    process,
    relay_env,
    stream_once,
)

MODES = ("direct", "litellm", "relay", "relay_cache")
TARGET_RATIO = 0.1  # issue 29: the relay's added cost, cache on, about 0.1x LiteLLM's
SIZES = ("small", "201")
WARMUP_ROUNDS = 3
STARTUP_S = 120.0  # the proxy imports a great deal before it listens


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def litellm_proxy(executable: Path, fake_port: int, model: str) -> Iterator[tuple[int, str]]:
    """A LiteLLM proxy bridging ``model`` to the fake's Responses endpoint: (port, key)."""
    key = "sk-" + secrets.token_hex(32)
    port = free_port()
    with tempfile.TemporaryDirectory() as scratch:
        config = Path(scratch) / "litellm.yaml"
        config.write_text(
            "model_list:\n"
            f"- model_name: {model}\n"
            "  litellm_params:\n"
            f"    model: openai/responses/{model}\n"
            f"    api_base: http://127.0.0.1:{fake_port}/v1\n"
            f"    api_key: {KEY}\n"
        )  # fmt: skip
        log = (Path(scratch) / "litellm.log").open("wb")
        env = {**os.environ, "LITELLM_MASTER_KEY": key, "LITELLM_LOG": "ERROR",
               "PYTHONUNBUFFERED": "1"}  # fmt: skip
        proc = subprocess.Popen(
            [str(executable), "--config", str(config), "--port", str(port), "--num_workers", "1"],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
        try:
            _wait_listening(proc, port, Path(scratch) / "litellm.log")
            yield port, key
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


def _wait_listening(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the LiteLLM proxy exited ({proc.returncode}):\n{tail}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health/liveliness")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.25)  # polling a subprocess's startup: no event to wait on
    raise RuntimeError(f"the LiteLLM proxy did not listen on {port} within {STARTUP_S:.0f} s")


def bodies(size: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Chat body every contestant gets, and the Responses body sent direct."""
    if size == "small":
        messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    else:
        messages = conversation(int(size))
    chat = {"model": "gpt-5", "messages": messages, "stream": True}
    off = dataclasses.replace(bench_config(Path(".")), reasoning_cache_enabled=False)
    return chat, {**translated(off, chat).upstream_body, "stream": True}


def run_litellm_rows(executable: Path, iterations: int) -> dict[str, Any]:
    """The comparison at each size in :data:`SIZES`."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    rows = []
    fake = [sys.executable, "-m", "fakeupstream", "--port", "0", "--max-records", "1"]
    with process(fake, env, "fakeupstream listening") as fake_port:
        for size in SIZES:
            chat, direct = bodies(size)
            with ExitStack() as stack:
                off = stack.enter_context(tempfile.TemporaryDirectory())
                on = stack.enter_context(tempfile.TemporaryDirectory())
                plan_env = {**env, "REASONING_CACHE_MAX_PLAN_RECORDS": "256"}
                relay = [sys.executable, "-m", "relay", "serve"]
                ports = {
                    "direct": fake_port,
                    "relay": stack.enter_context(process(
                        relay, relay_env(plan_env, fake_port, off, cache=False),
                        "relay listening")),
                    "relay_cache": stack.enter_context(process(
                        relay, relay_env(plan_env, fake_port, on, cache=True),
                        "relay listening")),
                }  # fmt: skip
                litellm_port, litellm_key = stack.enter_context(
                    litellm_proxy(executable, fake_port, chat["model"])
                )
                ports["litellm"] = litellm_port
                template = {"model": chat["model"]}
                turns = grow(ports["relay_cache"], fake_port, template, chat["messages"])
                load = [load_average()]
                times = timed(fake_port, ports, litellm_key, chat, direct, iterations)
                load.append(load_average())
            rows.append(summarize(size, times, turns, load))
    return {"rows": rows, "iterations": iterations, "target_ratio": TARGET_RATIO}


def rotation(round_index: int) -> tuple[str, ...]:
    """The order of round ``round_index``: :data:`MODES` rotated by one each round, so a
    round never starts with the contestant the previous one ended with."""
    shift = round_index % len(MODES)
    return (*MODES[shift:], *MODES[:shift])


def timed(fake_port: int, ports: dict[str, int], litellm_key: str, chat: dict[str, Any],
          direct: dict[str, Any], iterations: int) -> dict[str, list[float]]:  # fmt: skip
    conns = {mode: http.client.HTTPConnection("127.0.0.1", port, timeout=120)
             for mode, port in ports.items()}  # fmt: skip
    headers = {
        "direct": {"Authorization": f"Bearer {KEY}"},
        "litellm": {"Authorization": f"Bearer {litellm_key}"},
        "relay": RELAY_HEADERS, "relay_cache": RELAY_HEADERS,
    }  # fmt: skip
    enqueue(fake_port, paced_script(0))
    leading = events_to_first_delta(conns["direct"], direct, headers["direct"])
    script = paced_script(leading)
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for i in range(iterations + WARMUP_ROUNDS):
        for mode in rotation(i):
            enqueue(fake_port, script)
            if mode == "direct":
                sample = stream_once(conns[mode], "/v1/responses", direct, headers[mode],
                                     lambda f: b"output_text.delta" in f)  # fmt: skip
            else:
                sample = stream_once(conns[mode], "/v1/chat/completions", chat, headers[mode],
                                     lambda f: b'"content":"x' in f)  # fmt: skip
            if i >= WARMUP_ROUNDS:
                times[mode].append(sample[0])
    for conn in conns.values():
        conn.close()
    return times


def summarize(size: str, times: dict[str, list[float]], turns: int,
              load: list[float]) -> dict[str, Any]:  # fmt: skip
    def added(mode: str) -> float:
        return statistics.median(t - d for t, d in zip(times[mode], times["direct"], strict=True))

    litellm = added("litellm")
    return {
        "history": size, "rounds": len(times["direct"]), "replayed_turns": turns,
        "direct_s": statistics.median(times["direct"]),
        "added_s": {mode: added(mode) for mode in MODES[1:]},
        "ratio": {mode: added(mode) / litellm for mode in ("relay", "relay_cache")},
        "load_average": load,
    }  # fmt: skip
