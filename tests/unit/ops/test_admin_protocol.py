"""relay.ops.admin_protocol: one JSON request line, JSON lines back. Every malformed or
unknown request is refused with a code and a hint; ``status``, ``metrics`` and
``snapshot`` are answered from a real runtime (replay store in a temp dir)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from relay.ops.admin_protocol import COMMANDS, AdminService, encode, refusal
from relay.ops.metrics import relay_metrics
from tests.support.json_values import json_values
from tests.support.ops_runtime import OpsRuntime, ops_runtime


def service(ops: OpsRuntime, *, offline_fake: bool = False) -> AdminService:
    return AdminService(ops.runtime, ops.sampler, ops.snapshots, offline_fake=offline_fake)


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"status", "bad_request"),  # not JSON
        (b"\xff\xfe", "bad_request"),  # not UTF-8
        (b"[" * 100_000, "bad_request"),  # nested past the parser's stack
        (b'["status"]', "bad_request"),
        (b'"status"', "bad_request"),
        (b"{}", "bad_request"),
        (b'{"command": "status", "sql": "DROP TABLE payloads"}', "bad_request"),
        (b'{"command": "snapshot", "path": "/tmp/elsewhere"}', "bad_request"),
        (b'{"command": "vacuum"}', "unknown_command"),
        (b'{"command": "STATUS"}', "unknown_command"),
        (b'{"command": ["status"]}', "unknown_command"),
    ],
)
def test_anything_but_one_known_command_is_refused(tmp_path: Path, line: bytes, code: str) -> None:
    with ops_runtime(tmp_path, cache=False) as ops:
        answer = service(ops).parse(line)
        assert isinstance(answer, dict)
        assert answer["ok"] is False and answer["error"]["code"] == code
        if code == "unknown_command":
            assert answer["error"]["message"] == "commands: status, metrics, snapshot"
        else:
            assert '{"command"' in answer["error"]["message"]  # says what to send


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_is_recognised(tmp_path: Path, command: str) -> None:
    with ops_runtime(tmp_path, cache=False) as ops:
        assert service(ops).parse(json.dumps({"command": command}).encode() + b"\n") == command


@given(json_values)
def test_an_answer_is_exactly_one_line_that_reads_back(answer: Any) -> None:
    line = encode({"ok": True, "value": answer})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {"ok": True, "value": answer}


def test_encode_is_compact_and_sorted() -> None:
    assert encode(refusal("x", "y")) == b'{"error":{"code":"x","message":"y"},"ok":false}\n'


def handle(ops: OpsRuntime, line: bytes, svc: AdminService | None = None) -> tuple[
    dict[str, Any], list[dict[str, Any]]
]:  # fmt: skip
    emitted: list[dict[str, Any]] = []
    answer = ops.loop.run_until_complete((svc or service(ops)).handle(line, emitted.append))
    return answer, emitted


def test_status_is_the_status_document(tmp_path: Path) -> None:
    with ops_runtime(tmp_path) as ops:
        svc = service(ops, offline_fake=True)
        svc.metrics_url = "http://127.0.0.1:9464/metrics"
        answer, emitted = handle(ops, b'{"command": "status"}', svc)
        assert emitted == []
        assert answer["ok"] is True
        assert answer["relay"]["upstream"] == "offline fake"
        assert answer["relay"]["metricsUrl"] == "http://127.0.0.1:9464/metrics"
        assert answer["relay"]["cache"] == "on"
        json.loads(encode(answer))  # it travels as one JSON line


def test_metrics_is_the_prometheus_text(tmp_path: Path) -> None:
    with ops_runtime(tmp_path) as ops:
        relay_metrics(ops.runtime).request_finished("/v1/chat/completions", 200, None, 1.0)
        answer, _ = handle(ops, b'{"command": "metrics"}')
        assert answer["ok"] is True
        assert 'relay_requests_total{outcome="ok"' in answer["text"]


def test_a_snapshot_reports_progress_then_its_result(tmp_path: Path) -> None:
    with ops_runtime(tmp_path) as ops:
        answer, emitted = handle(ops, b'{"command": "snapshot"}')
        assert answer["ok"] is True, answer
        snapshot = answer["snapshot"]
        assert Path(snapshot["path"]).is_file()
        assert emitted and all(set(line) == {"progress"} for line in emitted)
        last = emitted[-1]["progress"]
        assert last["copiedPages"] == last["totalPages"] > 0


def test_a_snapshot_without_a_store_is_refused(tmp_path: Path) -> None:
    with ops_runtime(tmp_path, cache=False) as ops:
        answer, emitted = handle(ops, b'{"command": "snapshot"}')
        assert answer == refusal("no_store", answer["error"]["message"])
        assert "REASONING_CACHE_ENABLED" in answer["error"]["message"]
        assert emitted == []


def test_a_second_snapshot_in_the_same_loop_turn_is_refused(tmp_path: Path) -> None:
    with ops_runtime(tmp_path) as ops:
        svc = service(ops)
        first = svc.begin_snapshot(lambda _: None)
        assert not isinstance(first, dict)  # the running task
        second = svc.begin_snapshot(lambda _: None)
        assert isinstance(second, dict)
        assert second["error"]["code"] == "snapshot_in_progress"
        result = ops.loop.run_until_complete(first)
        assert Path(result.path).is_file()
