"""haproxy in front of several relays, run from the README's recipe
(contrib/team/haproxy.cfg: HTTP mode, round robin, each instance health-checked) with only
its address, its servers and its check timing replaced: on a loopback port (a listening
socket this process binds and hands over, ``bind fd@N``: no port race). The recipe names
the instance that served each answer in ``X-Relay-Instance`` (its server name), so a test
sees where each turn landed.

Streaming passes through as it comes: haproxy forwards an HTTP body as it arrives unless
told to buffer it (``option http-buffer-request`` is not set, no compression filter), and
``timeout server`` outlasts a slow model's silences. A connection refused by a dead
instance is retried on another (``option redispatch``); a request already sent is never
resent (haproxy does not retry once a request has left, and ``retry-on`` is left at
its default).

haproxy reports each instance's state change on stderr (``Server relays/r1 is DOWN``), so a
test waits on that line (an event), not a sleep. Missing haproxy skips the test, naming the
Debian package.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import pytest

from tests.support.serve_process import TIMEOUT, ProcessLines

RECIPE: Final = Path(__file__).resolve().parents[2] / "contrib" / "team" / "haproxy.cfg"
INSTANCE_HEADER: Final = "X-Relay-Instance"  # the recipe names the answering instance
HEALTH_PATH: Final = "/healthz"  # liveness: an instance whose store is down still bypasses
CHECK_INTERVAL_MS: Final = 200
# haproxy is found off PATH for a user whose PATH lacks the sbin directories.
SEARCH: Final = ("/usr/sbin", "/sbin")


def program() -> str | None:
    return shutil.which("haproxy") or shutil.which("haproxy", path=":".join(SEARCH))


def config(servers: Sequence[tuple[str, str]], listen_fd: int, health_path: str) -> str:
    """The README's recipe (contrib/team/haproxy.cfg) as the tests run it: listening on the
    inherited descriptor ``listen_fd``, in front of ``servers`` (name, ``host:port``), with
    checks fast enough for a test; every other line as the recipe has it."""
    replaced = {
        "bind ": f"    bind fd@{listen_fd}",
        "option httpchk ": f"    option httpchk GET {health_path}",
        "default-server ": f"    default-server check inter {CHECK_INTERVAL_MS}ms fall 2 rise 1",
    }
    lines = []
    for line in RECIPE.read_text(encoding="utf-8").splitlines():
        setting = line.strip()
        if setting.startswith("server "):
            continue
        key = next((key for key in replaced if setting.startswith(key)), None)
        lines.append(line if key is None else replaced[key])
    lines += [f"    server {name} {address}" for name, address in servers]
    return "\n".join(lines) + "\n"


def address_of(base: str) -> str:
    """``host:port`` of a relay's base URL (``http://127.0.0.1:1234/v1``)."""
    parts = urlsplit(base)
    return f"{parts.hostname}:{parts.port}"


class Haproxy:
    """haproxy (foreground) in front of ``servers`` (name, relay base URL). ``base`` is the
    relays' base URL through it."""

    def __init__(
        self, servers: Sequence[tuple[str, str]], directory: Path, health_path: str = HEALTH_PATH
    ) -> None:
        found = program()
        if found is None:
            pytest.skip("haproxy not found (Debian package 'haproxy')")
        self.names = [name for name, _ in servers]
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)  # connections queue until haproxy takes the socket over
        port = self.listener.getsockname()[1]
        directory.mkdir(parents=True, exist_ok=True)
        self.config_path = directory / "haproxy.cfg"
        pairs = [(name, address_of(base)) for name, base in servers]
        self.config_path.write_text(
            config(pairs, self.listener.fileno(), health_path), encoding="utf-8"
        )
        self.proc = subprocess.Popen(
            [found, "-db", "-f", str(self.config_path)], stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            pass_fds=(self.listener.fileno(),),
        )  # fmt: skip
        self.output = ProcessLines(self.proc)
        self.base = f"http://127.0.0.1:{port}/v1"

    def wait_down(self, name: str) -> None:
        """Until haproxy has taken ``name`` out of the rotation (its check failed)."""
        self.output.wait_for(rf"Server relays/{name} is DOWN")

    def wait_up(self, name: str) -> None:
        """Until haproxy has put ``name`` back (from now on: every server starts UP)."""
        self.output.wait_next(rf"Server relays/{name} is UP")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # hard stop: a test's streams are over
            self.proc.wait(TIMEOUT)
        self.output.close()
        self.listener.close()
