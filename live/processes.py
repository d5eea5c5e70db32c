"""The relay and the offline fake upstream as real subprocesses.

A relay is ``python -m relay serve`` with ``RELAY_PORT=0`` (its port is read from the
banner; a restart asks for the same port again so clients keep their base URL), its own
data directory, the cache on and an admin token for ``/api/cache/reasoning``. Its stderr
(the relay's safe event log, no bodies or secrets) is kept per incarnation and parsed
with :func:`scenarios.relaylog.parse_relay_events`.

The environment of every child is built from the parent's with every ``RELAY_``,
``OPENAI_`` and ``REASONING_`` variable and every provider key removed first, so a key in
the developer's shell can never reach an offline run.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from scenarios.httpjson import request_json
from scenarios.procs import ManagedProcess
from scenarios.relaylog import parse_relay_events

ROOT = Path(__file__).resolve().parent.parent
RELAY_BANNER = r"^relay listening on http://(?P<host>[^\s/]+):(?P<port>\d+)/v1"
FAKE_BANNER = r"^fakeupstream listening on http://(?P<host>[^\s/]+):(?P<port>\d+)"
_SCRUB_PREFIXES = ("RELAY_", "OPENAI_", "REASONING_", "LIVE_OFFLINE_")
_SCRUB_NAMES = frozenset({"DEEPSEEK_API_KEY", "LD_PRELOAD"})

Event = tuple[str, dict[str, str]]


def child_env(extra_secrets: Iterable[str] = ()) -> dict[str, str]:
    """The parent's environment without relay/OpenAI settings or provider keys."""
    drop = _SCRUB_NAMES | set(extra_secrets)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(_SCRUB_PREFIXES) and key not in drop
    }
    env["PYTHONPATH"] = os.pathsep.join(
        part for part in (str(ROOT), os.environ.get("PYTHONPATH", "")) if part
    )
    env["PYTHONUNBUFFERED"] = "1"
    return env


class FakeProcess:
    """``python -m fakeupstream`` with a fixed ciphertext secret (tokens stay valid across
    relay restarts) that accepts only the given keys."""

    def __init__(self, log_dir: Path, api_keys: Iterable[str], secret_hex: str) -> None:
        argv = [sys.executable, "-m", "fakeupstream", "--host", "127.0.0.1", "--port", "0"]
        argv += ["--secret-hex", secret_hex, "--max-records", "500", "--api-key", *api_keys]
        self.proc = ManagedProcess("fake", argv, child_env(), log_dir=log_dir, label="fake")
        self.base_url = ""  # http://127.0.0.1:PORT/v1 once started

    def start(self) -> None:
        match = self.proc.start(FAKE_BANNER)
        self.base_url = f"http://{match['host']}:{match['port']}/v1"

    @property
    def origin(self) -> str:
        return self.base_url.removesuffix("/v1")

    def script(self, *scripts: Mapping[str, Any]) -> None:
        request_json("POST", f"{self.origin}/__fake/scripts", list(scripts))

    def reset(self) -> None:
        request_json("POST", f"{self.origin}/__fake/reset", {})

    def calls(self) -> list[dict[str, Any]]:
        """Every model call since the last reset (``GET /__fake/requests``), oldest first."""
        _, body = request_json("GET", f"{self.origin}/__fake/requests")
        return [r for r in body or [] if r.get("path") in ("/v1/responses", "/v1/chat/completions")]

    def stop(self) -> None:
        self.proc.stop()


class RelayProcess:
    """One relay (and its restarts) on one data directory."""

    def __init__(
        self,
        label: str,
        env: Mapping[str, str],
        *,
        log_dir: Path,
        data_dir: Path,
        relay_token: str,
        admin_token: str,
        scrub: Iterable[str] = (),
    ) -> None:
        self.label = label
        self.data_dir = data_dir
        self.log_dir = log_dir
        self.relay_token = relay_token
        self.admin_token = admin_token
        self._env = {
            **child_env(scrub),
            "RELAY_HOST": "127.0.0.1",
            "RELAY_TOKEN": relay_token,
            "RELAY_ADMIN_TOKEN": admin_token,
            "RELAY_DATA_DIR": str(data_dir),
            "REASONING_CACHE_ENABLED": "1",
            "RELAY_LOG_LEVEL": "info",
            **env,
        }
        self.port = 0
        self.incarnations: list[ManagedProcess] = []
        # stats.replay of each stopped incarnation (read just before it stopped), if any.
        self.replay_counters: list[dict[str, int]] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def cache_path(self) -> Path:
        return self.data_dir / "reasoning-cache.sqlite"

    @property
    def alive(self) -> bool:
        return bool(self.incarnations) and self.incarnations[-1].alive

    def start(self) -> None:
        if self.alive:
            raise RuntimeError(f"relay {self.label} is already running")
        name = f"{self.label}-{len(self.incarnations) + 1}"
        env = {**self._env, "RELAY_PORT": str(self.port)}
        argv = [sys.executable, "-m", "relay", "serve"]
        proc = ManagedProcess("relay", argv, env, log_dir=self.log_dir, label=name, cwd=ROOT)
        self.incarnations.append(proc)
        match = proc.start(RELAY_BANNER)
        self.port = int(match["port"])

    def stop(self) -> None:
        """Read the replay counters, then SIGTERM (a graceful stop) and wait."""
        if not self.alive:
            return
        counters = self.replay_stats()
        if counters is not None:
            self.replay_counters.append(counters)
        self.incarnations[-1].stop(timeout=15)

    def restart(self) -> None:
        self.stop()
        self.start()

    def stats(self) -> dict[str, Any]:
        """``GET /api/cache/reasoning`` (the admin API)."""
        _, body = request_json(
            "GET",
            f"{self.origin}/api/cache/reasoning",
            headers={"Authorization": f"Bearer {self.admin_token}"},
        )
        return dict(body or {})

    def replay_stats(self) -> dict[str, int] | None:
        """``stats.replay`` (dispatched/accepted/rejected/resent), when the relay has it."""
        try:
            replay = self.stats().get("stats", {}).get("replay")
        except (OSError, RuntimeError):
            return None
        if not isinstance(replay, dict):
            return None
        return {str(k): int(v) for k, v in replay.items() if isinstance(v, int)}

    def events(self) -> list[Event]:
        """Every relay event of every incarnation, in order."""
        found: list[Event] = []
        for proc in self.incarnations:
            found += parse_relay_events(proc.stderr_text())
        return found

    def events_for(self, request_id: str | None) -> list[Event]:
        return [e for e in self.events() if e[1].get("request_id") == request_id]

    def stderr_tail(self) -> str:
        return self.incarnations[-1].stderr_tail() if self.incarnations else ""
