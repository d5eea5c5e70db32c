"""LiteLLM's Chat→Responses bridge as a bench contestant (opt-in).

Issue 29 states its targets two ways: at most 3 ms (small history) and 4 ms (201
messages) added with the cache on, "about 0.1x of LiteLLM's added cost measured the same
way". :func:`litellm_proxy` runs the LiteLLM proxy (``litellm --config``, one deployment
``openai/responses/<model>`` whose ``api_base`` is the fake, so it translates each Chat
request to the Responses API as the relay does) for :mod:`bench.contestants`, which times
it beside the relay on the same fake.

LiteLLM is not a dependency: pass ``--litellm PATH`` (its ``litellm`` executable);
``nox -s bench_litellm`` installs it into a virtualenv of its own and passes it.
"""

from __future__ import annotations

import http.client
import os
import secrets
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.servers import KEY

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
