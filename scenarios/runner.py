"""The runner: a fake upstream and a relay as real subprocesses, their logs, and cleanup.

One :class:`Harness` is one scenario run. It owns a temporary directory (data dirs, logs,
the history, fault files), starts ``python -m fakeupstream`` and ``python -m relay serve``
on free loopback ports (each prints its port in a banner; port 0 avoids races), records
every start/exit/fault in the :class:`~scenarios.history.History`, and in :meth:`close`
kills every child, runs registered cleanups (unmounts) and removes the directory — unless
the run failed, in which case the directory is kept and its path printed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from scenarios import launch
from scenarios.fakeapi import FakeControl
from scenarios.faults.disk import temp_prefix
from scenarios.history import History
from scenarios.launch import LaunchMod
from scenarios.procs import ManagedProcess, group_alive, processes_with_marker
from scenarios.relaylog import parse_relay_events
from scenarios.seed import Seed
from scenarios.wait import wait_until

ROOT = Path(__file__).resolve().parent.parent
RELAY_BANNER = r"^relay listening on http://(?P<host>[^\s/]+):(?P<port>\d+)/v1"
FAKE_BANNER = r"^fakeupstream listening on http://(?P<host>[^\s/]+):(?P<port>\d+)"

# Variables a developer's shell may carry that would leak into (and change) the children.
_SCRUB_PREFIXES = ("RELAY_", "OPENAI_", "REASONING_", "FAKETIME", "FIU_")
_SCRUB_NAMES = frozenset({"LD_PRELOAD", "DONT_FAKE_MONOTONIC"})
# The environment variable holding the key the relay sends to Chat providers (the fake).
PROVIDER_KEY_ENV = "SCENARIO_PROVIDER_KEY"


@dataclass(frozen=True)
class Provider:
    """One ``RELAY_PROVIDERS`` entry served by the fake (its ``/v1`` base URL and the
    harness's provider key are filled in at start); address it as ``name/model``.
    ``strict``: ``"auto"`` (the relay's rule table decides), ``True`` or ``False``."""

    name: str
    kind: str = "chat"
    strict: str | bool = "auto"

    def spec(self, base_url: str) -> dict[str, Any]:
        return {"kind": self.kind, "base_url": base_url, "api_key_env": PROVIDER_KEY_ENV,
                "strict": self.strict}  # fmt: skip


@dataclass(frozen=True)
class RelayOptions:
    """The relay's configuration for one start; small timeouts keep scenarios fast."""

    cache_enabled: bool = False
    idle_timeout_ms: int = 2_000
    delivery_timeout_ms: int = 2_000
    keepalive_ms: int = 0
    max_request_bytes: int | None = None
    max_sse_event_bytes: int | None = None
    log_level: str = "info"
    crash_at: str | None = None  # RELAY_TEST_CRASH_AT, e.g. "before_terminal_frame@2"
    credential: int = 0  # which of the harness's upstream API keys (OPENAI_API_KEY) to use
    cache_max_concurrent: int | None = None  # REASONING_CACHE_MAX_CONCURRENT (cached sessions)
    providers: tuple[Provider, ...] = ()  # RELAY_PROVIDERS, all pointing at the fake
    strict_ttl_s: int | None = None  # REASONING_CACHE_STRICT_TTL_SECONDS (>= 60)
    # REASONING_CACHE_RESERVE_BYTES: the minimum, so that a small tmpfs can hold it.
    reserve_bytes: int = 64 * 1024
    extra_env: tuple[tuple[str, str], ...] = ()
    mods: tuple[LaunchMod, ...] = ()  # faketime, libfiu, strace ...

    def env(self) -> dict[str, str]:
        env = {
            "REASONING_CACHE_ENABLED": "1" if self.cache_enabled else "0",
            "RELAY_IDLE_TIMEOUT_MS": str(self.idle_timeout_ms),
            "RELAY_DELIVERY_TIMEOUT_MS": str(self.delivery_timeout_ms),
            "RELAY_SSE_KEEPALIVE_MS": str(self.keepalive_ms),
            "RELAY_LOG_LEVEL": self.log_level,
            "REASONING_CACHE_RESERVE_BYTES": str(self.reserve_bytes),
        }
        if self.max_request_bytes is not None:
            env["RELAY_MAX_REQUEST_BYTES"] = str(self.max_request_bytes)
        if self.max_sse_event_bytes is not None:
            env["RELAY_MAX_SSE_EVENT_BYTES"] = str(self.max_sse_event_bytes)
        if self.crash_at:
            env["RELAY_TEST_CRASH_AT"] = self.crash_at
        if self.cache_max_concurrent is not None:
            env["REASONING_CACHE_MAX_CONCURRENT"] = str(self.cache_max_concurrent)
        if self.strict_ttl_s is not None:
            env["REASONING_CACHE_STRICT_TTL_SECONDS"] = str(self.strict_ttl_s)
        env.update(dict(self.extra_env))
        return env

    def provider_env(self, fake_base_url: str, key: str) -> dict[str, str]:
        """``RELAY_PROVIDERS`` (every provider at the fake's ``/v1``) and its key variable."""
        if not self.providers:
            return {}
        specs = {p.name: p.spec(fake_base_url.rstrip("/") + "/v1") for p in self.providers}
        return {"RELAY_PROVIDERS": json.dumps(specs), PROVIDER_KEY_ENV: key}


@dataclass
class RelayHandle:
    proc: ManagedProcess
    incarnation: int
    options: RelayOptions
    base_url: str  # http://127.0.0.1:PORT/v1
    port: int


@dataclass
class Harness:
    name: str
    seed: Seed
    keep: bool = False  # keep the temp dir even on success
    keep_on_failure: bool = True  # keep it for the post-mortem when the run failed
    tmp: Path = field(init=False)
    history: History = field(init=False)
    fake: FakeControl | None = None
    relay: RelayHandle | None = None
    relay_token: str = field(default_factory=lambda: "rt-" + secrets.token_hex(16))
    # Upstream credentials the fake accepts; a relay uses RelayOptions.credential's one.
    api_keys: tuple[str, ...] = field(
        default_factory=lambda: tuple("sk-scenario-" + secrets.token_hex(8) for _ in range(2))
    )
    # The key the relay sends to Chat providers (RelayOptions.providers); the fake accepts it.
    provider_key: str = field(default_factory=lambda: "sk-provider-" + secrets.token_hex(8))
    failed: bool = False
    _procs: list[ManagedProcess] = field(default_factory=list)
    _cleanups: list[tuple[str, Callable[[], None]]] = field(default_factory=list)
    _incarnations: int = 0
    _closed: bool = False

    def __post_init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix=temp_prefix()))
        for sub in ("logs", "relay-data", "fake", "faults"):
            (self.tmp / sub).mkdir()
        self.history = History(path=self.tmp / "history.jsonl")
        self.history.record("run_start", scenario=self.name, seed=self.seed.value)

    # --- paths ---------------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        return self.tmp / "relay-data"

    @property
    def faults_dir(self) -> Path:
        return self.tmp / "faults"

    @property
    def log_dir(self) -> Path:
        return self.tmp / "logs"

    @property
    def cache_path(self) -> Path:
        """The relay's reasoning cache file (REASONING_CACHE_PATH, else its default)."""
        options = self.relay.options if self.relay is not None else RelayOptions()
        configured = dict(options.extra_env).get("REASONING_CACHE_PATH")
        if not configured:
            return self.data_dir / "reasoning-cache.sqlite"
        return self.tmp / configured  # a relative path is the relay's: its cwd is self.tmp

    # --- children -----------------------------------------------------------------------

    def base_env(self) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(_SCRUB_PREFIXES) and key not in _SCRUB_NAMES
        }
        env["PYTHONPATH"] = os.pathsep.join(
            part for part in (str(ROOT), os.environ.get("PYTHONPATH", "")) if part
        )
        env["PYTHONUNBUFFERED"] = "1"
        env["SCENARIO_RUN_MARKER"] = str(self.tmp)
        return env

    def start_fake(self) -> FakeControl:
        argv = [sys.executable, "-m", "fakeupstream", "--host", "127.0.0.1", "--port", "0"]
        argv += ["--api-key", *self.api_keys, self.provider_key]
        argv += ["--seed", str(self.seed.randint("fake", 0, 2**31))]
        proc = ManagedProcess(
            "fake", argv, self.base_env(), log_dir=self.log_dir, label="fake", cwd=self.tmp
        )
        match = proc.start(FAKE_BANNER)
        self._procs.append(proc)
        self.fake = FakeControl(
            f"http://{match['host']}:{match['port']}", proc=proc, history=self.history
        )
        self.history.record("process_start", role="fake", pid=proc.pid, incarnation=1)
        return self.fake

    def start_relay(self, options: RelayOptions | None = None) -> RelayHandle:
        """Start a relay incarnation; a restart reuses the data dir and (if known) the port."""
        if self.fake is None:
            self.start_fake()
        assert self.fake is not None
        if self.relay is not None and self.relay.proc.alive:
            raise RuntimeError("a relay is already running; stop or kill it first")
        options = options or (self.relay.options if self.relay else RelayOptions())
        # Every call the previous incarnation made is attributed to its credential before
        # the next incarnation (maybe with another key) can make any.
        self.fake.exchanges()
        self.fake.credential = credential_label(options.credential)
        self._incarnations += 1
        port = self.relay.port if self.relay is not None else 0
        env = self.base_env()
        env.update(options.env())
        env.update(
            {
                "RELAY_HOST": "127.0.0.1",
                "RELAY_PORT": str(port),
                "RELAY_TOKEN": self.relay_token,
                "RELAY_DATA_DIR": str(self.data_dir),
                "OPENAI_API_KEY": self.api_keys[options.credential],
                "OPENAI_BASE_URL": self.fake.base_url + "/v1",
                **options.provider_env(self.fake.base_url, self.provider_key),
            }
        )
        argv, env = launch.apply(options.mods, [sys.executable, "-m", "relay", "serve"], env)
        label = f"relay-{self._incarnations}"
        proc = ManagedProcess("relay", argv, env, log_dir=self.log_dir, label=label, cwd=self.tmp)
        match = proc.start(RELAY_BANNER)
        self._procs.append(proc)
        port = int(match["port"])
        self.relay = RelayHandle(
            proc, self._incarnations, options, f"http://{match['host']}:{port}/v1", port
        )
        self.history.record(
            "process_start",
            role="relay",
            pid=proc.pid,
            incarnation=self._incarnations,
            cache_enabled=options.cache_enabled,
            crash_at=options.crash_at,
            credential=credential_label(options.credential),
            wrappers=[mod.name for mod in options.mods],
            providers=[provider.name for provider in options.providers],
        )
        return self.relay

    def require_relay(self) -> RelayHandle:
        if self.relay is None:
            raise RuntimeError("no relay started in this scenario")
        return self.relay

    def kill_relay(self, reason: str = "kill -9") -> None:
        """SIGKILL the relay now (a fault: recorded as such)."""
        relay = self.require_relay()
        self.sync_upstream()  # finished calls belong before the fault in the history
        self.history.record("fault", fault="kill", target="relay", reason=reason)
        relay.proc.kill9("harness_kill")
        self._record_exit(relay)

    def stop_relay(self) -> None:
        relay = self.require_relay()
        self.sync_upstream()
        relay.proc.stop()
        self._record_exit(relay)

    def restart_relay(self, *, kill: bool = False, **changes: Any) -> RelayHandle:
        """Stop (or kill -9) the relay and start it again, optionally with new options."""
        relay = self.require_relay()
        if relay.proc.alive:
            if kill:
                self._settle_answers(relay)
                self.kill_relay("restart")
            else:
                self.stop_relay()
        else:
            self._record_exit(relay)
        options = replace(relay.options, **changes) if changes else relay.options
        return self.start_relay(options)

    def _settle_answers(self, relay: RelayHandle, timeout: float = 10.0) -> None:
        """Before a planned kill -9 between turns: wait until each turn this incarnation
        answered in full has its ``chat_done`` (logged once the turn's intent is resolved),
        so the kill lands between requests, as the scenario says, and not in the race with
        the last answer's commit. A crash inside a request is what crash points are for."""
        started = max(
            (e.seq for e in self.history.of("process_start") if e.get("role") == "relay"),
            default=-1,
        )
        answered = {
            a.get("request_id")
            for a in self.history.of("client_answer")
            if a.seq > started
            and a.get("status") == 200
            and a.get("outcome") == "success"
            and a.get("endpoint") != "responses"  # the passthrough logs no chat_done
        } - {None}

        def settled() -> bool:
            done = {
                fields.get("request_id")
                for name, fields in parse_relay_events(relay.proc.stderr_text())
                if name == "chat_done"
            }
            return answered <= done or not relay.proc.alive

        wait_until(settled, timeout=timeout, what="the relay to resolve the turns it answered")

    def wait_relay_exit(self, timeout: float) -> int:
        """Wait for the relay to die on its own (armed crash point); record the exit."""
        relay = self.require_relay()
        code = relay.proc.wait_exit(timeout)
        self._record_exit(relay)
        return code

    def poll_relay(self) -> bool:
        """Whether the relay is alive; a death nobody caused is recorded as it is found."""
        relay = self.require_relay()
        if relay.proc.alive:
            return True
        self._record_exit(relay)
        return False

    def _record_exit(self, relay: RelayHandle) -> None:
        proc = relay.proc
        if proc.exit_recorded or proc.alive:
            return
        proc.exit_recorded = True
        code = proc.returncode
        stderr = proc.stderr_text()
        cause = proc.exit_cause
        if cause is None:
            armed = re.search(r"^crash_point (\S+) hit=(\d+) SIGKILL$", stderr, re.MULTILINE)
            cause = "crash_point" if armed and code == -9 else "unexpected"
        self.history.record(
            "process_exit",
            role="relay",
            pid=proc.pid,
            incarnation=relay.incarnation,
            returncode=code,
            cause=cause,
            stderr_tail=proc.stderr_tail(15) if cause == "unexpected" else "",
        )
        self._import_relay_log(relay)

    def _import_relay_log(self, relay: RelayHandle) -> None:
        for name, fields in parse_relay_events(relay.proc.stderr_text()):
            self.history.record(
                "relay_event", event=name, fields=fields, incarnation=relay.incarnation
            )

    # --- faults and cleanup registry -----------------------------------------------------

    def record_fault(self, fault: str, **details: Any) -> None:
        self.history.record("fault", fault=fault, **details)

    def on_close(self, label: str, callback: Callable[[], None]) -> None:
        """Register a cleanup (an unmount, a ballast file); run in reverse order on close."""
        self._cleanups.append((label, callback))

    def sync_upstream(self) -> None:
        if self.fake is not None and self.fake.proc is not None and self.fake.proc.alive:
            self.fake.sync()

    # --- teardown ----------------------------------------------------------------------

    def close(self) -> list[str]:
        """Kill all children, run cleanups, remove the temp dir; return any problems."""
        if self._closed:
            return []
        self._closed = True
        problems: list[str] = []
        with contextlib.suppress(Exception):
            self.sync_upstream()
        if self.relay is not None:
            if self.relay.proc.alive:
                self.relay.proc.stop(timeout=3)
            self._record_exit(self.relay)
        for proc in self._procs:
            proc.kill9("harness_kill")
        for label, callback in reversed(self._cleanups):
            try:
                callback()
            except Exception as exc:  # one failed cleanup must not skip the others
                problems.append(f"cleanup {label} failed: {exc}")
        problems.extend(self.leftovers())
        if problems:
            self.failed = True
        if self.keep or (self.failed and self.keep_on_failure) or problems:
            print(f"scenario {self.name}: run directory kept at {self.tmp}", file=sys.stderr)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return problems

    def leftovers(self) -> list[str]:
        """Children still running and mounts still present: both are harness bugs."""
        problems = [
            f"{proc.role} process group {proc.pid} still alive"
            for proc in self._procs
            if group_alive(proc.pid)
        ]
        problems += [f"stray process {pid}" for pid in processes_with_marker(str(self.tmp))]
        problems += [f"mount left at {point}" for point in mounts_under(self.tmp)]
        return problems

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self.failed = True
        self.close()

    def relay_processes(self) -> Sequence[ManagedProcess]:
        return [proc for proc in self._procs if proc.role == "relay"]


def credential_label(index: int) -> str:
    """How the history names an upstream credential (never the key itself)."""
    return f"key{index}"


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root`` (from /proc/self/mounts)."""
    prefix = str(root)
    points: list[str] = []
    with contextlib.suppress(OSError), open("/proc/self/mounts", encoding="utf-8") as mounts:
        for line in mounts:
            fields = line.split()
            if len(fields) > 1:
                point = fields[1].replace("\\040", " ")
                if point == prefix or point.startswith(prefix + "/"):
                    points.append(point)
    return points
