"""``relay status`` and ``relay admin ...`` as real processes against ``relay serve`` with
the embedded fake (relay.ops.commands)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support.relay_cli import relay_env, run_relay, serving

relay = run_relay


@pytest.fixture
def sock() -> Iterator[Path]:
    private = Path(tempfile.mkdtemp(prefix="relay-cli-"))
    yield private / "admin.sock"
    shutil.rmtree(private, ignore_errors=True)


def test_off_is_one_clear_line(tmp_path: Path) -> None:
    for args in (("status",), ("admin", "status"), ("status", "--json")):
        done = relay(*args, env=relay_env(tmp_path, RELAY_ADMIN_SOCKET="off"))
        assert done.returncode == 1 and done.stdout == ""
        assert done.stderr.count("\n") == 1 and "admin socket is off" in done.stderr
        assert "RELAY_ADMIN_SOCKET" in done.stderr


def test_not_reachable_is_one_clear_line(tmp_path: Path, sock: Path) -> None:
    done = relay("status", env=relay_env(tmp_path, RELAY_ADMIN_SOCKET=str(sock)))
    assert done.returncode == 1
    assert done.stderr == (
        f"relay status: no relay answers on {sock}: is it running (with this data directory, "
        "or RELAY_ADMIN_SOCKET / --socket naming this path)?\n"
    )
    default = tmp_path / "data" / "run"
    done = relay("status", env=relay_env(tmp_path))  # the default, never started
    assert done.returncode == 1
    assert done.stderr == (
        f"relay status: no relay answers on {default / 'admin.sock'}: {default} does not exist "
        "(is the relay running with this data directory?)\n"
    )


def test_status_metrics_and_snapshot_against_a_running_relay(tmp_path: Path, sock: Path) -> None:
    snaps = tmp_path / "inspection"
    env = relay_env(
        tmp_path, REASONING_CACHE_ENABLED="1", RELAY_ADMIN_SOCKET=str(sock),
        RELAY_ADMIN_SNAPSHOT_DIR=str(snaps),
    )  # fmt: skip
    with serving(env, "test_ops_cli relay serve") as proc:
        assert proc.stdout is not None
        banner = [proc.stdout.readline() for _ in range(6)]
        assert banner[5] == f"admin socket: {sock} (relay status, relay admin ...)\n"
        base = banner[0].split()[-1]
        token = (tmp_path / "data" / "relay-token").read_text().strip()
        messages = [{"role": "user", "content": "ping"}]
        for _ in range(2):
            answer = requests.post(
                f"{base}/chat/completions", json={"model": "gpt-5", "messages": messages},
                headers={"Authorization": f"Bearer {token}"}, timeout=10,
            ).json()  # fmt: skip
            messages += [answer["choices"][0]["message"], {"role": "user", "content": "again"}]

        table = relay("status", env=env)
        assert table.returncode == 0, table.stderr
        assert "\033[" not in table.stdout  # a pipe: no colour
        rows = dict(line.split(None, 1) for line in table.stdout.splitlines())
        assert rows["upstream"] == "offline fake" and rows["cache"] == "on"
        assert "since start: 1/1 accepted (100%)" in rows["replay"]
        assert "2 payloads" in rows["store"]
        print(table.stdout)  # the closing note's sample output

        doc = json.loads(relay("status", "--json", env=env).stdout)
        assert doc["replay"]["dispatched"] == 1 and doc["relay"]["cache"] == "on"

        metrics = relay("admin", "metrics", env=env)
        families = {f.name: f for f in text_string_to_metric_families(metrics.stdout)}
        assert families["relay_requests"].type == "counter"
        ok = [s for s in families["relay_requests"].samples
              if s.labels == {"route": "chat_completions", "outcome": "ok"}]  # fmt: skip
        assert ok[0].value == 2

        snapshot = relay("admin", "snapshot", env=env)
        assert snapshot.returncode == 0, snapshot.stderr
        assert "pages" in snapshot.stderr.splitlines()[-1]  # progress
        written = snapshot.stdout.split()[2]
        assert Path(written).parent == snaps and Path(written).exists()


def test_status_banner_and_metrics_give_the_concurrency_the_budget_allows(
    tmp_path: Path, sock: Path
) -> None:
    """REASONING_CACHE_MAX_CONCURRENT=100 at the default memory budget: 11 sessions fit."""
    env = relay_env(
        tmp_path, REASONING_CACHE_ENABLED="1", RELAY_ADMIN_SOCKET=str(sock),
        REASONING_CACHE_MAX_CONCURRENT="100",
    )  # fmt: skip
    with serving(env, "test_ops_cli relay serve (concurrency)") as proc:
        assert proc.stdout is not None
        banner = [proc.stdout.readline() for _ in range(7)]
        at = next(i for i, line in enumerate(banner) if line.startswith("reasoning cache:"))
        assert banner[at].endswith("; up to 11 cache sessions at once\n")
        assert banner[at + 1].startswith(
            "WARNING: REASONING_CACHE_MAX_CONCURRENT=100 cannot be reached: the memory budget "
            "fits 11 cache sessions"
        )
        assert "raise REASONING_CACHE_MEMORY_BYTES to at least " in banner[at + 1]
        table = relay("status", env=env)
        assert table.returncode == 0, table.stderr
        rows = dict(line.split(None, 1) for line in table.stdout.splitlines())
        assert rows["sessions"] == (
            "0 active of 11, 0 bypassed (REASONING_CACHE_MAX_CONCURRENT=100; the memory budget "
            "fits 11: raise REASONING_CACHE_MEMORY_BYTES)"
        )
        doc = json.loads(relay("status", "--json", env=env).stdout)
        assert (doc["cache"]["sessionLimit"], doc["cache"]["sessionLimitConfigured"]) == (11, 100)
        metrics = relay("admin", "metrics", env=env)
        families = {f.name: f for f in text_string_to_metric_families(metrics.stdout)}
        assert families["relay_cache_sessions_limit"].samples[0].value == 11
        proc.terminate()
        _, stderr = proc.communicate(timeout=30)
    warned = [line for line in stderr.splitlines() if "cache_concurrency_limited" in line]
    assert len(warned) == 1
    assert "configured=100 effective=11" in warned[0]
