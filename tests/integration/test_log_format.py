"""``relay serve`` with RELAY_LOG_FORMAT=json: every stderr line is one JSON object with the
fixed keys, whatever the client sent (control characters, lone surrogates, bad paths)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import requests

from tests.support.log_leaks import observe_process
from tests.support.relay_cli import relay_env, serving

TOKEN = "json-log-relay-token-0123456789"


def test_json_logs_are_one_object_per_line_with_the_fixed_keys(tmp_path: Path) -> None:
    env = relay_env(tmp_path, RELAY_TOKEN=TOKEN, RELAY_LOG_FORMAT="json", RELAY_LOG_LEVEL="debug")
    with serving(env, "test_log_format relay serve") as proc:
        assert proc.stdout is not None and proc.stderr is not None
        base = proc.stdout.readline().split()[-1]
        headers = {"Authorization": f"Bearer {TOKEN}"}
        ok = requests.post(
            f"{base}/chat/completions",
            json={"model": "gpt-5", "messages": [{"role": "user", "content": "ping"}]},
            headers=headers,
            timeout=10,
        )
        assert ok.status_code == 200
        forged = requests.post(
            f"{base}/chat/completions",
            data='{"model": "gpt-5\\n2026 INFO relay forged \\u001b[31m", "messages": '
            '[{"role": "user", "content": "x\\ud800"}]}',
            headers=headers,
            timeout=10,
        )
        assert forged.status_code == 400
        lost = requests.get(f"{base}/no/such/{TOKEN[:8]}\u00e9", headers=headers, timeout=10)
        assert lost.status_code == 404
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        stderr = proc.stderr.read()
    observe_process("test_log_format relay serve", stderr, env)
    lines = [json.loads(line) for line in stderr.splitlines()]  # every line is JSON
    assert all(list(line)[:4] == ["ts", "level", "event", "request_id"] for line in lines)
    assert all(line.isascii() for line in stderr.splitlines())
    events = [line["event"] for line in lines]
    assert {"chat_request", "chat_done", "request_failed", "request_done"} <= set(events)
    assert events[-1] == "relay_stopped"
    [done] = [line for line in lines if line["event"] == "chat_done"]
    assert done["request_id"] == ok.headers["x-request-id"]
    failed = {line["request_id"]: line for line in lines if line["event"] == "request_failed"}
    assert failed[forged.headers["x-request-id"]]["status"] == 400
    # A path a client chose is not logged.
    assert failed[lost.headers["x-request-id"]]["path"] == "<unrouted>"
    assert TOKEN[:8] not in stderr
