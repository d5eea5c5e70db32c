"""The recipes for running the relay every day: the Containerfile, the systemd unit and the
launchd agent. Each is parsed and held to its promises (a non-root user, private state,
the relay's own settings spelled right and valid); the container image is built and
inspected where a container engine runs, the unit goes through ``systemd-analyze verify``
where systemd is installed, and the agent's program is run here as launchd would run it."""

from __future__ import annotations

import json
import os
import plistlib
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from relay.settings.config import load_config
from scenarios.wait import wait_until
from tests.support.log_leaks import observe_process

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "Containerfile"
UNIT = ROOT / "contrib" / "systemd" / "relay.service"
AGENT = ROOT / "contrib" / "launchd" / "local.reasoning-replay-relay.plist"
CONFIG_SOURCE = (ROOT / "relay" / "settings" / "config.py").read_text(encoding="utf-8")
KNOWN = set(re.findall(r'"((?:RELAY|OPENAI|REASONING|LOG)_[A-Z_]+)"', CONFIG_SOURCE))
RELAY_SCRIPT = Path(sys.executable).parent / "relay"  # the installed console script


def relay_settings(env: dict[str, str]) -> dict[str, str]:
    """The relay's own settings among ``env``; each must be a name relay.settings.config reads."""
    ours = {k: v for k, v in env.items() if k.startswith(("RELAY_", "REASONING_", "OPENAI_"))}
    assert set(ours) <= KNOWN, f"not relay settings: {sorted(set(ours) - KNOWN)}"
    return ours


# --- Containerfile ----------------------------------------------------------------------


def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction: comments dropped, continuations joined."""
    joined = re.sub(r"\\\n", " ", "\n".join(x for x in text.splitlines() if not x.startswith("#")))
    found = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def container_env(steps: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for _, rest in (s for s in steps if s[0] == "ENV"):
        env.update(word.split("=", 1) for word in shlex.split(rest))  # type: ignore[misc]
    return env


def last(steps: list[tuple[str, str]], keyword: str) -> str:
    values = [rest for k, rest in steps if k == keyword]
    assert values, f"no {keyword}"
    return values[-1]


STEPS = instructions(CONTAINERFILE.read_text(encoding="utf-8"))


def test_the_image_runs_relay_serve_as_a_user_of_its_own() -> None:
    assert re.fullmatch(r"\S*python:3\.(1[1-9])-slim", last(STEPS, "FROM"))
    assert last(STEPS, "USER") not in ("root", "0", "")
    entrypoint = json.loads(last(STEPS, "ENTRYPOINT")) + json.loads(last(STEPS, "CMD"))
    assert entrypoint == ["relay", "serve"]
    keywords = [k for k, _ in STEPS]
    assert keywords.index("USER") < keywords.index("ENTRYPOINT")


def test_the_image_keeps_its_state_in_a_volume_and_listens_for_the_published_port() -> None:
    env = relay_settings(container_env(STEPS))
    config = load_config(env)
    assert config.host == "0.0.0.0"  # a published port arrives on the container's network
    assert str(config.data_dir) in json.loads(last(STEPS, "VOLUME"))
    assert last(STEPS, "EXPOSE") == str(config.port)
    assert config.admin_snapshot_dir.is_relative_to(config.data_dir)
    assert config.admin_socket is not None  # `podman exec relay relay status` finds it
    assert config.admin_socket.is_relative_to(config.data_dir)


def test_the_image_holds_only_what_the_wheel_holds() -> None:
    copied = {Path(p).name for _, rest in STEPS if _ == "COPY" for p in rest.split()[:-1]}
    assert copied == {
        "setup.cfg",
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "relay",
        "fakeupstream",
    }
    ignore = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert ignore[0] == "*" and {f"!{name}" for name in copied} <= set(ignore)


class Readiness(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/readyz" else 404)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def readyz(status: int) -> Iterator[int]:
    handler = type("Answer", (Readiness,), {"status": status})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (503, False), (404, False)])
def test_the_healthcheck_asks_readyz_on_the_relays_port(status: int, healthy: bool) -> None:
    options, _, command = last(STEPS, "HEALTHCHECK").partition(" CMD ")
    assert "--interval=" in options and "--timeout=" in options
    argv = json.loads(command)
    assert argv[0] == "python"  # the image's; here, this interpreter
    with readyz(status) as port:
        done = subprocess.run(
            [sys.executable, *argv[1:]],
            env={**os.environ, "RELAY_PORT": str(port)}, capture_output=True, timeout=30,
            check=False,
        )  # fmt: skip
    assert (done.returncode == 0) is healthy


def engine() -> list[str] | None:
    """A container engine that answers, with its build options, or None."""
    for name, build in (("podman", ["--format", "docker"]), ("docker", [])):
        path = shutil.which(name)
        if path is None:
            continue
        probe = subprocess.run([path, "info"], capture_output=True, timeout=60, check=False)
        if probe.returncode == 0:
            return [path, *build]
    return None


def test_the_image_builds_and_runs_where_a_container_engine_runs() -> None:
    found = engine()
    if found is None:
        pytest.skip("no running container engine (podman, docker): checked statically only")
    path, *build_options = found
    tag = f"reasoning-replay-relay-test:{uuid.uuid4().hex[:12]}"
    subprocess.run(
        [path, "build", *build_options, "-t", tag, "-f", str(CONTAINERFILE), str(ROOT)],
        check=True, capture_output=True, timeout=1800,
    )  # fmt: skip
    try:
        inspected = subprocess.run(
            [path, "image", "inspect", tag], check=True, capture_output=True, text=True
        )
        config = json.loads(inspected.stdout)[0]["Config"]
        assert config["User"] == last(STEPS, "USER")
        assert "/readyz" in " ".join(config["Healthcheck"]["Test"])
        assert "/data" in config["Volumes"] and "8787/tcp" in config["ExposedPorts"]
        version = subprocess.run(
            [path, "run", "--rm", tag, "--version"],
            check=True, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert version.stdout.startswith("relay ")
        listing = subprocess.run(
            [path, "run", "--rm", "--entrypoint", "python", tag, "-c",
             "import importlib.util as u; print([n for n in ('scenarios', 'live', 'tests', "
             "'bench') if u.find_spec(n)])"],
            check=True, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert listing.stdout.strip() == "[]"
    finally:
        subprocess.run([path, "image", "rm", "-f", tag], capture_output=True, check=False)


# --- systemd ----------------------------------------------------------------------------


def unit_sections(text: str) -> dict[str, list[tuple[str, str]]]:
    sections: dict[str, list[tuple[str, str]]] = {}
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = line.strip("[]")
            sections[current] = []
        else:
            key, _, value = line.partition("=")
            sections[current].append((key, value))
    return sections


UNIT_TEXT = UNIT.read_text(encoding="utf-8")
SERVICE = dict(unit_sections(UNIT_TEXT)["Service"])  # the last value of each key


def unit_environment(state: Path, runtime: Path) -> dict[str, str]:
    pairs = [v for k, v in unit_sections(UNIT_TEXT)["Service"] if k == "Environment"]
    env = dict(pair.split("=", 1) for pair in pairs)
    return {k: v.replace("%S", str(state)).replace("%t", str(runtime)) for k, v in env.items()}


def test_the_unit_runs_relay_serve_hardened() -> None:
    assert SERVICE["ExecStart"].split()[1:] == ["serve"]
    assert Path(SERVICE["ExecStart"].split()[0]).name == "relay"
    hardening = {
        "DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict",
        "ProtectHome": "yes", "PrivateTmp": "yes", "PrivateDevices": "yes", "UMask": "0077",
        "CapabilityBoundingSet": "", "RestrictSUIDSGID": "yes", "LockPersonality": "yes",
    }  # fmt: skip
    assert {k: SERVICE.get(k) for k in hardening} == hardening
    assert SERVICE["KillSignal"] == "SIGTERM"  # the relay's clean shutdown
    assert dict(unit_sections(UNIT_TEXT)["Install"])["WantedBy"] == "multi-user.target"


def test_the_units_settings_are_valid_and_keep_state_in_its_state_directory(
    tmp_path: Path,
) -> None:
    state, runtime = tmp_path / "state", tmp_path / "run"
    config = load_config(relay_settings(unit_environment(state, runtime)))
    assert config.host == "127.0.0.1"
    assert config.reasoning_cache_enabled
    own = state / SERVICE["StateDirectory"]
    assert config.data_dir == own and config.admin_snapshot_dir.is_relative_to(own)
    assert config.admin_socket is not None
    assert config.admin_socket.parent == runtime / SERVICE["RuntimeDirectory"]
    assert SERVICE["StateDirectoryMode"] == SERVICE["RuntimeDirectoryMode"] == "0700"
    assert "ReadWritePaths" not in SERVICE  # writable: its own directories only


def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed: the unit is checked by parsing only")
    # verify also checks that ExecStart exists: point it at this installation's relay.
    unit = tmp_path / "relay.service"
    unit.write_text(
        UNIT_TEXT.replace(SERVICE["ExecStart"].split()[0], str(RELAY_SCRIPT)), encoding="utf-8"
    )
    done = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert str(unit) not in done.stderr, done.stderr  # no warning about the unit itself


# --- launchd ----------------------------------------------------------------------------


def test_the_agent_is_a_valid_plist_that_starts_at_login_and_restarts_on_failure() -> None:
    agent = plistlib.loads(AGENT.read_bytes())
    assert agent["Label"] == AGENT.stem
    assert agent["RunAtLoad"] is True
    assert agent["KeepAlive"] == {"SuccessfulExit": False}
    assert agent["Umask"] == 0o077
    assert "EnvironmentVariables" not in agent  # settings and keys live in a private file
    program = agent["ProgramArguments"]
    assert program[:2] == ["/bin/sh", "-c"]
    assert re.search(r'^exec "\$HOME/\.local/bin/relay" serve ', program[2], re.MULTILINE)


@pytest.fixture
def home() -> Iterator[Path]:
    """A short home: the agent's admin socket path must fit in sockaddr_un (104 bytes on
    macOS, 108 on Linux), which pytest's temporary paths would not."""
    path = Path(tempfile.mkdtemp(prefix="relay-agent-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_the_agents_program_starts_the_relay_with_its_state_in_application_support(
    home: Path,
) -> None:
    """Run as launchd runs it: a login environment with HOME, the relay where pipx puts
    it, the user's env file read, output appended to the log."""
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "relay").symlink_to(RELAY_SCRIPT)
    settings = home / ".config" / "reasoning-replay-relay" / "env"
    settings.parent.mkdir(parents=True)
    # Read by the relay (--env-file), not by a shell: a comment and a quoted value.
    settings.write_text(
        "# the agent's settings\nRELAY_PORT=0\nRELAY_LOG_LEVEL='info'\n", encoding="utf-8"
    )
    program = plistlib.loads(AGENT.read_bytes())["ProgramArguments"]
    exported = dict(re.findall(r'(\w+)="?([^"\s]*)"?', program[2].split("export ", 1)[1]))
    relay_settings(exported)  # every exported name is a relay setting
    env = {"HOME": str(home), "PATH": os.defpath, "LANG": "C.UTF-8"}
    log = home / "Library" / "Logs" / "reasoning-replay-relay.log"
    state = home / "Library" / "Application Support" / "reasoning-replay-relay"

    def written() -> str:
        return log.read_text(encoding="utf-8") if log.exists() else ""

    with subprocess.Popen(program, env=env) as proc:
        try:
            wait_until(
                lambda: "relay listening on" in written() or proc.poll() is not None,
                timeout=30, what="the relay's banner in the agent's log",
            )  # fmt: skip
            assert proc.poll() is None, written()
            assert (state / "relay-token").is_file()
            assert "reasoning cache: on" in written()
            assert ":8787/" not in written()  # RELAY_PORT=0 came from the env file
            assert (state / "run" / "admin.sock").is_socket()
            proc.send_signal(signal.SIGTERM)  # what launchctl bootout sends
            assert proc.wait(15) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            observe_process("launchd agent relay", written())
