"""The runner's promises: no stray process or mount after success, failure or a killed
relay; exits classified by cause; and the checker failing on a mutated real history."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from scenarios import client
from scenarios.checker import check_history
from scenarios.dsl import Chat, ClientGot, RelayOptions, Scenario
from scenarios.faults.crash import arm
from scenarios.faults.disk import tmpfs_missing
from scenarios.history import History
from scenarios.play import ScenarioFailed, play
from scenarios.procs import group_alive, processes_with_marker
from scenarios.runner import Harness, mounts_under
from scenarios.seed import Seed

pytestmark = pytest.mark.scenario

BODY = {"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def assert_clean(harness: Harness) -> None:
    assert processes_with_marker(str(harness.tmp)) == []
    assert all(not group_alive(proc.pid) for proc in harness._procs)
    assert mounts_under(harness.tmp) == []


def test_success_removes_everything(seed: Seed) -> None:
    with Harness("clean", seed) as harness:
        relay = harness.start_relay()
        assert client.chat(relay.base_url, harness.relay_token, BODY).outcome == "success"
    assert_clean(harness)
    assert not harness.tmp.exists()


def test_failure_mid_stream_still_cleans_up_and_keeps_the_logs(seed: Seed) -> None:
    with pytest.raises(RuntimeError, match="boom"), Harness("fails", seed) as harness:
        relay = harness.start_relay()
        conn = client.RelayConnection(relay.base_url, harness.relay_token)
        conn.send_request("POST", "/chat/completions", json.dumps(BODY).encode())
        raise RuntimeError("boom")
    conn.close()
    assert_clean(harness)
    assert (harness.tmp / "history.jsonl").exists()  # kept for the post-mortem
    shutil.rmtree(harness.tmp)


def test_exits_are_classified_by_cause(seed: Seed) -> None:
    with Harness("exits", seed) as harness:
        harness.start_relay()
        harness.kill_relay()
        harness.start_relay(RelayOptions(crash_at=arm("before_upstream_send")))
        client.chat(harness.require_relay().base_url, harness.relay_token, BODY)
        harness.wait_relay_exit(10)
        harness.start_relay(RelayOptions())
        os.kill(harness.require_relay().proc.pid, signal.SIGKILL)  # nobody the harness knows
        harness.require_relay().proc.wait_exit(10)
        assert not harness.poll_relay()
        causes = [e["cause"] for e in harness.history.of("process_exit")]
        report = check_history(harness.history)
    assert causes == ["harness_kill", "crash_point", "unexpected"]
    assert report.count("no_crash_on_bad_input") == 1  # only the unexplained death
    assert_clean(harness)


def test_checker_fails_on_a_mutated_real_history(seed: Seed) -> None:
    s = Scenario("two_turns")
    s >> Chat("first", name="t1") >> Chat("second", name="t2")
    s << ClientGot("t2", outcome="success")
    result = play(s, seed, keep=True)
    try:
        path = result.run_dir / "history.jsonl"
        assert check_history(History.load(path)).ok
        lines = path.read_text().splitlines()
        calls = [i for i, line in enumerate(lines) if '"kind": "upstream_exchange"' in line]
        assert len(calls) == 2

        failed = json.loads(lines[calls[0]])
        failed["outcome"] = "failed"  # the upstream failed, yet the client saw success
        report = check_history(_with(path, lines, calls[0], failed))
        assert report.count("no_false_success") == 1

        forged = json.loads(lines[calls[1]])
        forged["body"]["input"].insert(
            1, {"type": "reasoning", "id": "rs_x", "encrypted_content": "gAAAAAforged"}
        )
        report = check_history(_with(path, lines, calls[1], forged))
        assert report.stats["wrong_replays"] == 1
    finally:
        shutil.rmtree(result.run_dir)


def _with(path: Path, lines: list[str], index: int, event: dict[str, object]) -> History:
    mutated = path.with_name("mutated.jsonl")
    mutated.write_text("\n".join([*lines[:index], json.dumps(event), *lines[index + 1 :]]))
    return History.load(mutated)


def test_failed_scenario_unmounts_and_reports_the_seed(seed: Seed) -> None:
    missing = tmpfs_missing()
    if missing:
        pytest.skip(missing)
    s = Scenario("doomed", tmpfs_bytes=1 << 20)
    s >> Chat("hi", name="t1")
    s << ClientGot("t1", outcome="error")  # wrong on purpose
    with pytest.raises(ScenarioFailed) as failure:
        play(s, seed, target="tests/x.py::doomed")
    message = str(failure.value)
    assert f"RELAY_SCENARIO_SEED={seed.value} python -m pytest tests/x.py::doomed" in message
    assert "!!<< ClientGot(turn='t1', outcome='error')" in message
    run_dir = Path(message.rsplit("run directory (logs, history.jsonl): ", 1)[1].strip())
    assert mounts_under(run_dir) == []
    assert processes_with_marker(str(run_dir)) == []
    shutil.rmtree(run_dir)
