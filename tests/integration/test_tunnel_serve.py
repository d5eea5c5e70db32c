"""``relay serve`` with RELAY_TUNNEL_CMD, as real processes: the relay, and the stand-in
tunnel program (tests/support/fake_tunnel.py) as its child."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

from relay.tunnel.supervisor import MAX_URLS
from tests.support import fake_tunnel
from tests.support.processes import running, wait_gone
from tests.support.relay_cli import relay_env, run_relay

AUTHTOKEN = "2AbCdEfGhIjKlMnOpQrStUvWx_serve"
NAME = Path(sys.executable).name


class Relay:
    """A running ``relay serve``: its stdout as lines to wait for, its stderr at the end."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, prefix: str, timeout: float = 30) -> list[str]:
        """Lines read up to and including the first that starts with ``prefix``."""
        start = len(self.lines)
        while True:
            line = self._queue.get(timeout=timeout)
            assert line is not None, f"relay stdout ended before {prefix!r}: {self.lines}"
            self.lines.append(line)
            if line.startswith(prefix):
                return self.lines[start:]

    @property
    def port(self) -> int:
        return int(self.lines[0].rsplit(":", 1)[1].split("/")[0])

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 20) -> tuple[int, str]:
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        assert self.proc.stderr is not None
        return code, self.proc.stderr.read()


@contextmanager
def serving(tmp_path: Path, *tunnel_args: str, **extra: str) -> Iterator[Relay]:
    state = tmp_path / "tunnel"
    command = shlex.join(
        [
            sys.executable,
            fake_tunnel.__file__,
            "--port",
            "{port}",
            "--state",
            str(state),
            *tunnel_args,
        ]
    )
    env = relay_env(tmp_path, RELAY_TUNNEL_CMD=command, NGROK_AUTHTOKEN=AUTHTOKEN, **extra)
    with subprocess.Popen(
        [sys.executable, "-m", "relay", "serve"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            yield Relay(proc)
        finally:
            proc.kill()
            proc.wait()
            pid = state / "pid"
            if pid.exists():  # what a failed test may have left: the stand-in's whole group
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(int(pid.read_text()), signal.SIGKILL)


def test_the_url_is_printed_with_the_cursor_settings_and_the_tunnel_stops_with_the_relay(
    tmp_path: Path,
) -> None:
    with serving(tmp_path, "--style", "cloudflared", "--grandchild") as relay:
        banner = relay.wait_for("tunnel: ")
        assert banner[0].startswith("relay listening on http://127.0.0.1:")
        pid = int(banner[-1].split("(pid ")[1].split(")")[0])
        assert banner[-1] == (
            f"tunnel: {NAME} started (pid {pid}) for port {relay.port}; its public URL and the "
            "Cursor settings follow once it reports one"
        )
        url = fake_tunnel.DEFAULT_URLS["cloudflared"]
        token_file = tmp_path / "data" / "relay-token"
        assert relay.wait_for("tunnel: public URL") == [
            f"tunnel: public URL {url} (from {NAME}, pid {pid})"
        ]
        assert relay.wait_for("    OpenAI API Key") == [
            "  In Cursor > Settings > Models:",
            f"    Override OpenAI Base URL: {url}/v1",
            f"    OpenAI API Key: the relay token stored in {token_file}",
        ]
        assert int((tmp_path / "tunnel" / "pid").read_text()) == pid  # the stand-in itself
        # The relay's actual port (RELAY_PORT=0) went into {port}.
        assert (tmp_path / "tunnel" / "port").read_text() == str(relay.port)
        names = json.loads((tmp_path / "tunnel" / "env").read_text())
        assert "NGROK_AUTHTOKEN" in names
        # No setting or key of the relay's; only the mark that finds its descendants.
        assert [n for n in names if n.startswith(("RELAY_", "OPENAI_"))] == ["RELAY_TUNNEL_MARK"]
        grandchild = int((tmp_path / "tunnel" / "grandchild").read_text())
        code, stderr = relay.stop(signal.SIGTERM)
        assert code == 0
        assert not running(pid)
        assert wait_gone(grandchild, 10)
        token = token_file.read_text().strip()
        for output in ("\n".join(relay.lines), stderr):
            assert token not in output and AUTHTOKEN not in output
        assert f"tunnel_url url={url}" in stderr
        assert f"tunnel_stopped program={NAME} status='exited with status 0' forced=False" in stderr


def test_a_tunnel_ignoring_sigterm_is_killed_when_the_relay_is_interrupted(
    tmp_path: Path,
) -> None:
    with serving(tmp_path, "--style", "ngrok", "--ignore-sigterm") as relay:
        relay.wait_for("tunnel: public URL")
        pid = int((tmp_path / "tunnel" / "pid").read_text())
        code, stderr = relay.stop(signal.SIGINT)  # Ctrl-C
        assert code == 0
        assert not running(pid)
        assert f"tunnel_stopped program={NAME} status='was killed by SIGKILL' forced=True" in stderr


def test_a_dying_tunnel_is_reported_and_the_relay_keeps_serving(tmp_path: Path) -> None:
    with serving(tmp_path, "--style", "ngrok", "--leak-env", "NGROK_AUTHTOKEN") as relay:
        relay.wait_for("    OpenAI API Key")
        pid = int((tmp_path / "tunnel" / "pid").read_text())
        url = fake_tunnel.DEFAULT_URLS["ngrok"]
        # While it runs: ready, and relay status (the data dir's socket) shows its URL.
        ready = requests.get(f"http://127.0.0.1:{relay.port}/readyz", timeout=10)
        assert ready.status_code == 200
        assert ready.json()["checks"]["tunnel"] == {"ok": True, "state": "up"}
        assert tunnel_row(tmp_path) == f"up {url} ({NAME})"
        os.kill(pid, signal.SIGUSR1)
        report = relay.wait_for("tunnel: its last output (sanitized):")
        assert report == [
            f"tunnel: {NAME} (pid {pid}) exited with status 3 and is not restarted; the relay "
            f"keeps serving locally at http://127.0.0.1:{relay.port}/v1; {url} no longer "
            "reaches it",
            "tunnel: its last output (sanitized):",
        ]
        last = [relay.wait_for("  | ")[-1] for _ in range(5)]
        assert last[-1] == "  | ERROR:  ERR_NGROK_107"
        not_ready = requests.get(f"http://127.0.0.1:{relay.port}/readyz", timeout=10)
        assert not_ready.status_code == 503
        assert not_ready.json()["checks"]["tunnel"] == {"ok": False, "state": "exited"}
        assert tunnel_row(tmp_path) == f"exited {url} ({NAME})"
        assert last[-2] == "  | ERROR:  authtoken [redacted] was rejected"
        assert not running(pid)
        token = (tmp_path / "data" / "relay-token").read_text().strip()
        answer = requests.post(
            f"http://127.0.0.1:{relay.port}/v1/chat/completions",
            json={"model": "gpt-5", "messages": [{"role": "user", "content": "still here?"}]},
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        ).json()
        assert "Echo: still here?" in answer["choices"][0]["message"]["content"]
        code, stderr = relay.stop(signal.SIGTERM)
        assert code == 0
        assert f"tunnel_exited program={NAME} status='exited with status 3'" in stderr
        for output in ("\n".join(relay.lines), stderr):
            assert AUTHTOKEN not in output


def tunnel_row(tmp_path: Path) -> str:
    """``relay status``'s tunnel row, asked with the data directory alone."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RELAY_"))}
    done = run_relay("status", "--data-dir", str(tmp_path / "data"), env=env)
    assert done.returncode == 0, done.stderr
    rows = dict(line.split(None, 1) for line in done.stdout.splitlines())
    return rows["tunnel"]


def test_an_unknown_placeholder_stops_startup_with_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RELAY_"))}
    result = subprocess.run(
        [sys.executable, "-m", "relay", "serve"],
        env={
            **env,
            "RELAY_PORT": "0",
            "RELAY_DATA_DIR": str(tmp_path / "data"),
            "RELAY_TUNNEL_CMD": f"{sys.executable} -c pass {{prot}}",
        },
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "relay: configuration error: RELAY_TUNNEL_CMD: unknown placeholder {prot}; only {port} "
        "(the relay's listening port) is substituted"
    ]


def chat_seconds(relay: Relay, token: str, turns: int) -> list[float]:
    """How long each of ``turns`` chat requests takes, one after another."""
    took = []
    with requests.Session() as session:
        for turn in range(turns):
            started = time.monotonic()
            answer = session.post(
                f"http://127.0.0.1:{relay.port}/v1/chat/completions",
                json={"model": "gpt-5", "messages": [{"role": "user", "content": f"t{turn}"}]},
                headers={"Authorization": f"Bearer {token}"},
                timeout=30,
            )
            took.append(time.monotonic() - started)
            assert answer.status_code == 200
    return took


def test_a_flooding_tunnel_neither_slows_chat_nor_floods_the_log(tmp_path: Path) -> None:
    """Like ``yes https://…``: chat latency during the flood, as a ratio to idle."""
    with serving(tmp_path, "--style", "ngrok", "--flood") as relay:
        relay.wait_for("    OpenAI API Key")
        token = (tmp_path / "data" / "relay-token").read_text().strip()
        chat_seconds(relay, token, 5)  # warm up
        idle = statistics.median(chat_seconds(relay, token, 30))
        pid = int((tmp_path / "tunnel" / "pid").read_text())
        os.kill(pid, signal.SIGUSR2)
        relay.wait_for("tunnel: python")  # ... keeps reporting new public URLs
        flooded = statistics.median(chat_seconds(relay, token, 30))
        print(f"\nchat latency: idle {idle * 1000:.1f} ms, flood {flooded * 1000:.1f} ms")
        assert flooded < 5 * idle + 0.02, (idle, flooded)  # 100-250x before the fix
        code, stderr = relay.stop(signal.SIGTERM)
        assert code == 0
    logged = [line for line in stderr.splitlines() if " tunnel_url url=" in line]
    assert len(logged) == MAX_URLS  # the real one, then the first seven flood hosts
    assert stderr.count("tunnel_urls_ignored") == 1


def test_descendants_that_left_the_group_stop_with_the_relay(tmp_path: Path) -> None:
    with serving(tmp_path, "--style", "ngrok", "--setsid-grandchild", "--daemon") as relay:
        relay.wait_for("tunnel: public URL")
        left = [int((tmp_path / "tunnel" / n).read_text()) for n in ("setsid-grandchild", "daemon")]
        try:
            assert all(running(pid) for pid in left)
            code, _stderr = relay.stop(signal.SIGTERM)
            assert code == 0
            assert all(wait_gone(pid, 10) for pid in left)
        finally:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
