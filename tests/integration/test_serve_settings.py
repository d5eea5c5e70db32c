"""``relay serve`` as a real process: where its state lives (absolute paths, a token
generated or reused), its flags and ``--env-file`` (flags > environment > file), a clean
failure when a port is taken, and ``relay status`` finding it with no variable at all."""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path

from tests.support.log_leaks import observe_process
from tests.support.relay_cli import banner, relay_env, run_relay, serving

LABEL = "test_serve_settings relay serve"


def without_data_dir(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = relay_env(tmp_path, **extra)
    del env["RELAY_DATA_DIR"]
    return env


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0


def test_relative_paths_are_absolute_and_the_token_says_whether_it_is_new(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    env = relay_env(tmp_path, RELAY_DATA_DIR="state", REASONING_CACHE_ENABLED="1")
    data = work / "state"
    with serving(env, LABEL, cwd=work) as proc:
        lines = banner(proc)
        assert lines[2:] == [
            f"data directory: {data}",
            f"relay token: generated a new relay token in {data / 'relay-token'} (send it as "
            "a Bearer token)",
            f"reasoning cache: on ({data / 'reasoning-cache.sqlite'}); up to 10 cache "
            "sessions at once",
            f"admin socket: {data / 'run' / 'admin.sock'} (relay status, relay admin ...)",
        ]
        stop(proc)
    with serving(env, LABEL, cwd=work) as proc:
        lines = banner(proc)
        assert lines[3] == (
            f"relay token: using the relay token in {data / 'relay-token'} (send it as a "
            "Bearer token)"
        )
        stop(proc)
    with serving({**env, "RELAY_TOKEN": "a-token-of-sixteen-or-more"}, LABEL, cwd=work) as proc:
        assert banner(proc)[3] == "relay token: RELAY_TOKEN from the environment"
        stop(proc)


def test_flags_beat_the_environment_which_beats_the_env_file(tmp_path: Path) -> None:
    env_file = tmp_path / "relay.env"
    env_file.write_text(
        "# the standing defaults\n"
        f'RELAY_DATA_DIR="{tmp_path / "from-file"}"\n'
        "RELAY_HOST=127.0.0.1 # loopback\n"
        "RELAY_PORT=1\n"  # a privileged port: the flag below must win
    )
    env = {**without_data_dir(tmp_path), "RELAY_DATA_DIR": str(tmp_path / "from-env")}
    del env["RELAY_PORT"]
    args = ("--env-file", str(env_file), "--port", "0", "--data-dir", str(tmp_path / "flag"))
    with serving(env, LABEL, *args) as proc:
        lines = banner(proc)
        assert lines[0].startswith("relay listening on http://127.0.0.1:")
        assert lines[2] == f"data directory: {tmp_path / 'flag'}"
        stop(proc)
    with serving(env, LABEL, "--env-file", str(env_file), "--port", "0") as proc:
        assert banner(proc)[2] == f"data directory: {tmp_path / 'from-env'}"
        stop(proc)
    del env["RELAY_DATA_DIR"]
    with serving(env, LABEL, "--env-file", str(env_file), "--port", "0") as proc:
        assert banner(proc)[2] == f"data directory: {tmp_path / 'from-file'}"
        stop(proc)
    done = run_relay("serve", "--env-file", str(env_file), "--port", "x", env=env)
    observe_process(LABEL, done.stdout + done.stderr)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "relay: configuration error: --port='x': expected a whole number >= 0 (RELAY_PORT)"
    ]


def test_a_port_in_use_is_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = relay_env(tmp_path, REASONING_CACHE_ENABLED="1")
        done = run_relay("serve", "--port", str(port), env=env)
    observe_process(LABEL, done.stdout + done.stderr)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"relay: cannot start: 127.0.0.1:{port} is in use (RELAY_PORT)"
    ]
    data = tmp_path / "data"
    assert not (data / "reasoning-cache.sqlite").exists()
    assert not (data / "relay-token").exists()
    assert not (data / "run" / "admin.sock").exists()


def test_a_port_in_use_leaves_an_existing_store_untouched(tmp_path: Path) -> None:
    env = relay_env(tmp_path, REASONING_CACHE_ENABLED="1")
    with serving(env, LABEL) as proc:
        banner(proc)
        stop(proc)
    store = tmp_path / "data" / "reasoning-cache.sqlite"
    before = {
        p.name: (p.stat().st_mtime_ns, p.read_bytes())
        for p in store.parent.glob("reasoning-cache*")
    }
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_relay("serve", env={**env, "RELAY_METRICS_PORT": str(port)})
    observe_process(LABEL, done.stdout + done.stderr)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"relay: cannot start: 127.0.0.1:{port} is in use (RELAY_METRICS_PORT)"
    ]
    after = {
        p.name: (p.stat().st_mtime_ns, p.read_bytes())
        for p in store.parent.glob("reasoning-cache*")
    }
    assert after == before


def test_status_finds_the_relay_from_the_data_dir_with_no_variable(tmp_path: Path) -> None:
    env = without_data_dir(tmp_path, RELAY_METRICS_PORT="0")
    with serving(env, LABEL, cwd=tmp_path) as proc:  # ./data, the default
        assert proc.stdout is not None
        lines = [proc.stdout.readline().rstrip("\n") for _ in range(7)]
        assert (
            lines[5]
            == f"admin socket: {tmp_path / 'data' / 'run' / 'admin.sock'} (relay status, relay admin ...)"
        )
        metrics_url = lines[6].removeprefix("metrics: ")
        here = run_relay("status", env=env, cwd=tmp_path)
        assert here.returncode == 0, here.stderr
        rows = dict(line.split(None, 1) for line in here.stdout.splitlines())
        assert rows["upstream"] == "offline fake"
        assert rows["metrics"] == metrics_url
        elsewhere = run_relay(
            "status", "--data-dir", str(tmp_path / "data"), env=env, cwd=Path("/")
        )
        assert elsewhere.returncode == 0, elsewhere.stderr
        found = dict(line.split(None, 1) for line in elsewhere.stdout.splitlines())
        assert (found["upstream"], found["metrics"]) == ("offline fake", metrics_url)
        second = run_relay("serve", env=env, cwd=tmp_path)
        assert second.returncode == 1
        assert second.stderr.splitlines() == [
            f"relay: cannot start: another relay answers on {tmp_path / 'data' / 'run' / 'admin.sock'} "
            f"(RELAY_ADMIN_SOCKET): is a relay already running with the data directory "
            f"{tmp_path / 'data'}?"
        ]
        stop(proc)
    gone = run_relay("status", env=env, cwd=tmp_path)
    assert gone.returncode == 1 and gone.stderr.count("\n") == 1
    assert "no relay answers on" in gone.stderr
    off = run_relay("status", env={**env, "RELAY_ADMIN_SOCKET": "off"}, cwd=tmp_path)
    assert off.returncode == 1 and "the admin socket is off" in off.stderr
