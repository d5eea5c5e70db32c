"""``relay serve`` as a real process: embedded fake banner, config errors, clean SIGTERM."""

from __future__ import annotations

import signal
import stat
import subprocess
import sys
from pathlib import Path

import requests

from tests.support.log_leaks import observe_process
from tests.support.relay_cli import banner, relay_env, serving

LABEL = "test_cli relay serve"


def test_serve_without_key_uses_offline_fake_and_says_so(tmp_path: Path) -> None:
    with serving(relay_env(tmp_path), LABEL) as proc:
        lines = banner(proc)
        assert lines[0].startswith("relay listening on http://127.0.0.1:")
        assert "OFFLINE FAKE" in lines[1] and "not from a real model" in lines[1]
        token_file = tmp_path / "data" / "relay-token"
        assert str(token_file) in lines[3]
        token = token_file.read_text().strip()
        assert token not in "".join(lines)
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
        base = lines[0].split()[-1]
        answer = requests.post(
            f"{base}/chat/completions",
            json={"model": "gpt-5", "messages": [{"role": "user", "content": "ping"}]},
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        ).json()
        assert "Echo: ping" in answer["choices"][0]["message"]["content"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        assert proc.stderr is not None
        stderr = proc.stderr.read()
        assert token not in stderr
        observe_process(LABEL, stderr, relay_env(tmp_path))


def test_invalid_config_stops_startup_with_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "relay", "serve"],
        env=relay_env(tmp_path, RELAY_PORT="x"),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    observe_process(LABEL, result.stdout + result.stderr)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "relay: configuration error: RELAY_PORT='x': expected a whole number >= 0"
    ]


def test_a_second_relay_on_the_same_cache_is_refused_clearly(tmp_path: Path) -> None:
    env = relay_env(tmp_path, REASONING_CACHE_ENABLED="1", RELAY_ADMIN_SOCKET="off")
    with serving(env, LABEL) as first:
        assert first.stdout is not None
        lines = [first.stdout.readline() for _ in range(5)]
        assert lines[4].startswith("reasoning cache: on (")
        second = subprocess.run(
            [sys.executable, "-m", "relay", "serve"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        observe_process(LABEL, second.stdout + second.stderr, env)
        assert second.returncode == 1
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith("relay: cannot open the reasoning cache: ")
        assert "another relay process" in lines[0]
        first.send_signal(signal.SIGTERM)
        assert first.wait(10) == 0


def test_an_existing_data_dir_is_made_private_even_with_relay_token(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    env = relay_env(tmp_path, RELAY_TOKEN="a-token-of-sixteen-or-more")
    with serving(env, LABEL) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("relay listening on")
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        assert not (data / "relay-token").exists()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0


def test_a_data_dir_that_cannot_be_private_stops_startup_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("not a directory")
    result = subprocess.run(
        [sys.executable, "-m", "relay", "serve"],
        env=relay_env(tmp_path, RELAY_TOKEN="a-token-of-sixteen-or-more"),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    observe_process(LABEL, result.stdout + result.stderr)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"relay: configuration error: the data directory {tmp_path / 'data'} (RELAY_DATA_DIR) "
        "exists and is not a directory; remove it or choose another"
    ]


def test_a_latched_store_is_refused_with_one_line_saying_what_to_do(tmp_path: Path) -> None:
    """While ``<store>.guard`` exists, ``relay serve`` neither reuses the store (cache on)
    nor records a coverage gap in it (cache off): exit 1 and one line naming the guard,
    what failed and the operator's steps."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    store = data / "reasoning-cache.sqlite"
    store.write_bytes(b"")  # any store file: it must not even be opened
    guard = data / "reasoning-cache.sqlite.guard"
    guard.write_text('{"what": "dispatch intent", "code": "SQLITE_FULL", "at": 0}\n')
    for enabled in ("1", "0"):
        done = subprocess.run(
            [sys.executable, "-m", "relay", "serve"],
            env=relay_env(tmp_path, REASONING_CACHE_ENABLED=enabled),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 1, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith("relay: cannot open the reasoning cache: ")
        assert f"{guard} exists" in lines[0]
        assert "dispatch intent failed with SQLITE_FULL" in lines[0]
        assert f"then delete {guard} to reuse it" in lines[0]
    assert store.read_bytes() == b"" and guard.exists()
