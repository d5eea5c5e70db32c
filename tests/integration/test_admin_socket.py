"""The admin socket, /metrics and inspection snapshots on a real relay (relay.ops): real
loopback servers, a real Unix socket, real SQLite files."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
import socket
import sqlite3
import stat
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from relay.app.server import RelayServer
from relay.clock import Clock, ManualClock
from relay.errors import ConfigError
from relay.ops.admin_client import request
from relay.ops.store_sample import TTL_S
from relay.storage.replay_store import ReasoningStore
from tests.support.sqlite_store import sqlite_store
from tests.support.stack import Stack, running_stack

Values = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@contextmanager
def admin_stack(
    tmp_path: Path, env: dict[str, str] | None = None, *, clock: Clock | None = None
) -> Iterator[tuple[Stack, Path]]:
    # A short directory of its own: a Unix socket path has at most 107 bytes.
    private = Path(tempfile.mkdtemp(prefix="relay-admin-"))
    sock = private / "run" / "admin.sock"
    base = {
        "REASONING_CACHE_ENABLED": "1",
        "RELAY_ADMIN_SOCKET": str(sock),
        "RELAY_METRICS_PORT": "0",
        "RELAY_ADMIN_SNAPSHOT_DIR": str(tmp_path / "inspection"),
    }
    try:
        with running_stack(tmp_path / "data", {**base, **(env or {})}, clock=clock) as stack:
            yield stack, sock
    finally:
        shutil.rmtree(private, ignore_errors=True)


def chat(stack: Stack, messages: list[dict[str, Any]], **extra: Any) -> str:
    with stack.openai() as client:
        answer = client.chat.completions.create(model="gpt-5", messages=messages, **extra)
    return answer.choices[0].message.content or ""


def conversation(stack: Stack, turns: int) -> list[dict[str, Any]]:
    """``turns`` chat turns, each replaying the blocks of the ones before."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]
    for turn in range(turns):
        text = chat(stack, messages)
        messages += [
            {"role": "assistant", "content": text},
            {"role": "user", "content": f"q{turn}"},
        ]
    return messages


def store_of(stack: Stack) -> ReasoningStore:
    assert stack.relay.runtime is not None
    return sqlite_store(stack.relay.runtime.cache.store)


def metric_values(text: str) -> Values:
    out: Values = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name, tuple(sorted(s.labels.items()))] = s.value
    return out


def scrape(stack: Stack) -> Values:
    assert stack.relay.ops is not None and stack.relay.ops.metrics_http is not None
    port = stack.relay.ops.metrics_http.port
    answer = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    assert answer.status_code == 200
    assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return metric_values(answer.text)


def settle(stack: Stack) -> None:
    """Wait until no cache session is open: a request's last writes (resolving its intent)
    follow the answer its client already has."""
    runtime = stack.relay.runtime
    assert runtime is not None

    async def idle() -> None:
        # No event marks a session's end: look again after every other callback has run.
        while runtime.sessions or runtime.active:  # noqa: ASYNC110
            await asyncio.sleep(0.01)

    stack.loop.run(idle(), timeout=10)


def store_checksum(stack: Stack) -> str:
    """Every row of every table (read on the store's own connection, on its loop), then the
    database file's and the WAL's bytes."""
    store = store_of(stack)

    async def rows() -> str:
        conn = store._conn
        assert conn is not None
        digest = hashlib.sha256()
        tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY 1")
        for (table,) in tables.fetchall():
            for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1"):
                digest.update(repr(row).encode())
        return digest.hexdigest()

    files = hashlib.sha256()
    for suffix in ("", "-wal"):
        files.update(store.path.with_name(store.path.name + suffix).read_bytes())
    return stack.loop.run(rows()) + files.hexdigest()


# --- the socket -------------------------------------------------------------------------


def test_the_socket_is_private_and_nothing_of_it_is_on_http(tmp_path: Path) -> None:
    with admin_stack(tmp_path) as (stack, sock):
        assert stat.S_ISSOCK(sock.lstat().st_mode)
        assert stat.S_IMODE(sock.lstat().st_mode) == 0o600
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
        assert "admin socket: " + str(sock) in "\n".join(stack.relay.banner())
        # The relay's public port has no /metrics and no admin command.
        public = f"http://127.0.0.1:{stack.relay.port}"
        assert requests.get(f"{public}/metrics", timeout=10).status_code == 404
        assert stack.relay.ops is not None and stack.relay.ops.metrics_http is not None
        listener = stack.relay.ops.metrics_http._server._sockets
        assert {s.getsockname()[0] for s in listener.values()} == {"127.0.0.1"}
    assert not sock.exists()  # removed at shutdown


def test_on_by_default_in_the_data_dir_and_off_when_told(tmp_path: Path) -> None:
    with running_stack(tmp_path / "data") as stack:
        assert stack.relay.ops is not None and stack.relay.ops.admin is not None
        sock = tmp_path / "data" / "run" / "admin.sock"
        assert stack.relay.ops.admin.path == sock
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(sock.lstat().st_mode) == 0o600
        assert request(sock, "status")["ok"]
        assert stack.relay.ops.metrics_http is None  # /metrics stays off unless set
    assert not sock.exists()
    with running_stack(tmp_path / "data", {"RELAY_ADMIN_SOCKET": "off"}) as stack:
        assert stack.relay.ops is not None
        assert stack.relay.ops.admin is None and stack.relay.ops.metrics_http is None
        assert not any(line.startswith(("admin", "metrics")) for line in stack.relay.banner())


@pytest.mark.parametrize(("line", "code"), [
    (b"status\n", "bad_request"),
    (b'{"command": "vacuum"}\n', "unknown_command"),
    (b'{"command": "status", "sql": "DELETE FROM payloads"}\n', "bad_request"),
    (b'{"command": "snapshot", "path": "/etc"}\n', "bad_request"),
    (b'["status"]\n', "bad_request"),
])  # fmt: skip
def test_a_fixed_protocol(tmp_path: Path, line: bytes, code: str) -> None:
    with admin_stack(tmp_path) as (_stack, sock):
        assert raw_exchange(sock, line)["error"]["code"] == code


def test_an_overlong_request_line_is_answered_then_dropped(tmp_path: Path) -> None:
    with admin_stack(tmp_path) as (_stack, sock):
        for line in (b"x" * 4096 + b"\n", b"x" * 1024 + b"\n", b'{"command": "status"}' * 60):
            assert raw_exchange(sock, line)["error"] == {
                "code": "too_large",
                "message": "a request line is at most 1024 bytes",
            }
        assert request(sock, "status")["ok"]  # and the socket serves on


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"[" * 1020 + b"\n", "bad_request"),  # nested past the interpreter's recursion limit
        (b'{"command":' * 80 + b'"status"' + b"}" * 80 + b"\n", "unknown_command"),
        (b"\xff\xfe\x00garbage\n", "bad_request"),  # not UTF-8
        (b"\n", "bad_request"),
    ],
)
def test_a_malformed_request_line_gets_an_error_frame_and_no_error_is_logged(
    tmp_path: Path, line: bytes, code: str, caplog: pytest.LogCaptureFixture
) -> None:
    with admin_stack(tmp_path) as (_stack, sock), caplog.at_level(logging.INFO):
        assert raw_exchange(sock, line)["error"]["code"] == code
        assert request(sock, "status")["ok"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def raw_exchange(sock: Path, line: bytes) -> dict[str, Any]:
    import json

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(10)
        client.connect(str(sock))
        client.sendall(line)
        answer = client.makefile("rb").readline()
    return dict(json.loads(answer))


@pytest.mark.parametrize("mode", [0o755, 0o770, 0o701])
def test_startup_refuses_a_socket_directory_open_to_others(tmp_path: Path, mode: int) -> None:
    private = Path(tempfile.mkdtemp(prefix="relay-admin-"))
    try:
        private.chmod(mode)
        env = {"REASONING_CACHE_ENABLED": "1", "RELAY_ADMIN_SOCKET": str(private / "a.sock")}
        refused = pytest.raises(ConfigError, match=r"RELAY_ADMIN_SOCKET: .* open to others")
        with refused, running_stack(tmp_path / "data", env):
            pass
        # The store's lock was released: a relay without the socket starts on it.
        with running_stack(tmp_path / "data", {"REASONING_CACHE_ENABLED": "1"}) as stack:
            assert stack.relay.runtime is not None and stack.relay.runtime.cache.enabled
    finally:
        shutil.rmtree(private)


# --- status -----------------------------------------------------------------------------


def test_status_counts_a_replaying_conversation(tmp_path: Path) -> None:
    with admin_stack(tmp_path) as (stack, sock):
        conversation(stack, 3)  # turns 2 and 3 replay
        bad = requests.post(f"{stack.base_url}/chat/completions", json={}, timeout=10)
        assert bad.status_code == 401
        status = request(sock, "status")
        assert status["ok"] is True
        assert status["relay"]["cache"] == "on"
        assert status["relay"]["upstream"].startswith("http://127.0.0.1:")  # origin only
        assert status["requests"]["chat_completions"] == {"ok": 3, "invalid_api_key": 1}
        replay = status["replay"]
        assert (replay["dispatched"], replay["accepted"], replay["rejected"]) == (2, 2, 0)
        assert replay["lastHour"]["dispatched"] == 2 and replay["lastHour"]["accepted"] == 2
        assert status["cache"]["activeSessions"] == 0 and status["cache"]["requests"] == 3
        assert status["errors"]["latest"][0]["code"] == "invalid_api_key"
        store = status["store"]
        assert store["counts"]["payloads"] == {"value": 3, "exact": True}
        assert store["counts"]["observations"]["value"] == 3
        assert store["payloadBytes"]["exact"] and store["payloadBytes"]["value"] > 0
        assert store["oldestPayloadTouchedAt"] is not None
        assert store["fileBytes"] > 0 and store["cachedForSeconds"] == TTL_S
        text = str(status)
        assert stack.token not in text and "sk-test-upstream-key" not in text


def test_status_touches_nothing(tmp_path: Path) -> None:
    """Rows and file bytes are the same before and after status reads that each scanned
    the store afresh (the fake clock moves past the five-second cache between them)."""
    clock = ManualClock()
    with admin_stack(tmp_path, clock=clock) as (stack, sock):
        conversation(stack, 3)
        settle(stack)
        assert stack.relay.ops is not None
        sampler = stack.relay.ops.sampler
        before = store_checksum(stack)
        reads = sampler.reads
        for _ in range(3):
            request(sock, "status")
            request(sock, "metrics")
            clock.advance(TTL_S + 1)
        assert sampler.reads == reads + 3  # each status re-read; metrics shared its sample
        assert store_checksum(stack) == before


# --- metrics ----------------------------------------------------------------------------


def test_metrics_move_after_real_requests(tmp_path: Path) -> None:
    clock = ManualClock()
    with admin_stack(tmp_path, clock=clock) as (stack, sock):
        before = scrape(stack)
        conversation(stack, 3)
        requests.post(f"{stack.base_url}/chat/completions", json={}, timeout=10)  # 401
        clock.advance(TTL_S)  # the store sample is read again
        after = scrape(stack)

        def grew(name: str, **labels: str) -> float:
            key = (name, tuple(sorted(labels.items())))
            return after.get(key, 0.0) - before.get(key, 0.0)

        chat_route = {"route": "chat_completions"}
        assert grew("relay_requests_total", outcome="ok", **chat_route) == 3
        assert grew("relay_requests_total", outcome="invalid_api_key", **chat_route) == 1
        assert grew("relay_time_to_first_byte_seconds_count", **chat_route) == 3
        assert grew("relay_upstream_latency_seconds_count", provider="openai") == 3
        assert grew("relay_replay_dispatched_total", kind="chat") == 2
        assert grew("relay_replay_accepted_total", kind="chat") == 2
        assert grew("relay_cache_requests_total") == 3
        assert after["relay_store_payloads", ()] == 3
        assert after["relay_store_aggregate_exact", (("aggregate", "payloads"),)] == 1
        assert after["relay_store_size_bytes", (("file", "main"),)] > 0
        assert after["relay_cache_sessions_limit", ()] == 10
        assert ("relay_store_oldest_payload_age_seconds", ()) in after
        # The same registry over the admin socket.
        over_socket = metric_values(request(sock, "metrics")["text"])
        key = ("relay_requests_total", (("outcome", "ok"), ("route", "chat_completions")))
        assert over_socket[key] == after[key]
        # Bounded labels: no ids, tokens or paths anywhere.
        for name, labels in after:
            for value in dict(labels).values():
                assert not value.startswith(("req_", "chatcmpl-", "/")), (name, value)


@pytest.mark.parametrize("code", [None, "rate_limit_exceeded"])
def test_an_upstream_4xx_is_counted_by_its_own_code_or_its_status(
    tmp_path: Path, code: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    with admin_stack(tmp_path) as (stack, _sock), caplog.at_level(logging.INFO):
        error = {"status": 429, "message": "Slow down.", "code": code}
        stack.script({"http_error": error})
        answer = requests.post(
            f"{stack.base_url}/chat/completions",
            json={"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]},
            headers=stack.headers(),
            timeout=10,
        )
        assert answer.status_code == 429
        assert answer.json()["error"]["code"] == code  # the upstream's envelope, untouched
        outcome = code or "http_429"
        key = ("relay_requests_total", (("outcome", outcome), ("route", "chat_completions")))
        assert scrape(stack)[key] == 1
        assert "bad_gateway" not in {
            value for _name, labels in scrape(stack) for _, value in labels
        }
    assert f"code={outcome}" in caplog.text and "bad_gateway" not in caplog.text


def test_strict_restores_are_counted_by_provider(tmp_path: Path) -> None:
    with running_stack(
        tmp_path / "data",
        {"REASONING_CACHE_ENABLED": "1", "RELAY_METRICS_PORT": "0"},
        providers={"deepthink": {"kind": "chat", "strict": True}},
        fake_strict="tool_turns",
    ) as stack:
        tools = [{"type": "function", "function": {"name": "read_file", "parameters": {}}}]
        messages: list[dict[str, Any]] = [{"role": "user", "content": "CALL_TOOL read it"}]
        with stack.openai() as client:
            first = client.chat.completions.create(
                model="deepthink/deepthink-reasoner", messages=messages, tools=tools
            )
            calls = first.choices[0].message.tool_calls
            assert calls
            call = calls[0]
            messages += [
                {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                {"role": "tool", "tool_call_id": call.id, "content": "file text"},
            ]
            client.chat.completions.create(
                model="deepthink/deepthink-reasoner", messages=messages, tools=tools
            )
        values = scrape(stack)
        assert values["relay_strict_restored_total", (("provider", "deepthink"),)] == 1
        assert values.get(("relay_strict_missed_total", (("provider", "deepthink"),)), 0) == 0


# --- snapshots --------------------------------------------------------------------------


def test_a_snapshot_during_two_streaming_generations_is_consistent(tmp_path: Path) -> None:
    with admin_stack(tmp_path) as (stack, sock):
        messages = conversation(stack, 2)
        slow = {"toxics": {"latency_ms": 150, "latency_after_events": 3}, "deltas": 12}
        stack.script(slow, slow)
        answers: list[str] = []

        def stream() -> None:
            with (
                stack.openai() as client,
                client.chat.completions.create(
                    model="gpt-5", messages=messages, stream=True
                ) as chunks,
            ):
                answers.append("".join(c.choices[0].delta.content or "" for c in chunks))

        threads = [threading.Thread(target=stream) for _ in range(2)]
        for thread in threads:
            thread.start()
        stack.loop.run(stack.fake.wait_for_requests(4, ended=False))
        progress: list[dict[str, int]] = []
        answer = request(sock, "snapshot", on_progress=progress.append)
        assert all(thread.is_alive() for thread in threads)  # still streaming
        for thread in threads:
            thread.join(30)
        assert len(answers) == 2 and all("continuity: replayed=2" in a for a in answers)

        assert answer["ok"] is True and progress
        assert progress[-1]["copiedPages"] == progress[-1]["totalPages"]
        path = Path(answer["snapshot"]["path"])
        assert path.parent == tmp_path / "inspection"
        assert stat.S_IMODE(path.stat().st_mode) == 0o400
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert store_of(stack).secret not in path.read_bytes()
        copy = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            assert copy.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            assert copy.execute("PRAGMA foreign_key_check").fetchall() == []
            # Both generations were in flight: their intents are in the copy, pinned to
            # the blocks they replay, and their observations are not (yet).
            intents = copy.execute("SELECT phase FROM intents").fetchall()
            assert intents == [("dispatch",), ("dispatch",)]
            assert copy.execute("SELECT count(*) FROM observations").fetchone()[0] == 2
            keys = {k for (k,) in copy.execute("SELECT key FROM meta")}
            assert "secret" not in keys and "inspection-copy" in keys
        finally:
            copy.close()
        # The relay replays on afterwards: the two earlier blocks (the two generations
        # competed for one position, so by design neither of theirs is replayed).
        follow_up = [*messages, {"role": "assistant", "content": answers[0]},
                     {"role": "user", "content": "more"}]  # fmt: skip
        assert "continuity: replayed=2 intact=2 misplaced=0" in chat(stack, follow_up)


def test_a_second_snapshot_is_refused_while_one_runs(tmp_path: Path) -> None:
    with admin_stack(tmp_path) as (stack, _sock):
        conversation(stack, 2)
        assert stack.relay.ops is not None
        service = stack.relay.ops.service

        async def both() -> tuple[dict[str, Any], Path]:
            first = service.begin_snapshot(lambda message: None)
            second = await service.handle(b'{"command": "snapshot"}', lambda message: None)
            return second, (await first).path

        second, path = stack.loop.run(both())
        assert second == {"ok": False, "error": {
            "code": "snapshot_in_progress",
            "message": "a snapshot is already being copied; wait for it"}}  # fmt: skip
        assert path.exists()
        later = stack.loop.run(service.handle(b'{"command": "snapshot"}', lambda m: None))
        assert later["ok"] and Path(later["snapshot"]["path"]).exists() and path.exists()


def test_shutdown_waits_for_a_pending_snapshot(tmp_path: Path) -> None:
    with admin_stack(tmp_path) as (stack, sock):
        conversation(stack, 2)
        ops = stack.relay.ops
        assert ops is not None

        async def snapshot_then_stop() -> Any:
            task = ops.snapshots.start()
            await stack.relay.stop()  # the store closes only after the copy
            return task

        task = stack.loop.run(snapshot_then_stop())
        assert task.done() and task.exception() is None
        path = task.result().path
        copy = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            assert copy.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            assert copy.execute("SELECT count(*) FROM payloads").fetchone()[0] == 2
        finally:
            copy.close()
        # A new relay binds the same socket path (the old one removed it).
        stack.relay = RelayServer(stack.config, clock=stack.clock)
        stack.loop.run(stack.relay.start())
        assert request(sock, "status")["ok"]
        assert os.listdir(tmp_path / "inspection") == [path.name]


def test_a_refused_replay_is_counted_by_reason(tmp_path: Path) -> None:
    with admin_stack(tmp_path) as (stack, sock):
        messages = conversation(stack, 2)
        stack.fake.rotate_key()  # every stored ciphertext is now refused
        chat(stack, messages)  # refused, then resent once without replay
        values = scrape(stack)
        rejected = ("relay_replay_rejected_total",
                    (("kind", "chat"), ("reason", "invalid_encrypted_content")))  # fmt: skip
        assert values[rejected] == 1
        assert values["relay_replay_resent_total", (("kind", "chat"),)] == 1
        assert values["relay_replay_dispatched_total", (("kind", "chat"),)] == 2
        assert values["relay_replay_accepted_total", (("kind", "chat"),)] == 1
        status = request(sock, "status")
        assert status["replay"]["rejectedByReason"] == {"invalid_encrypted_content": 1}


def test_another_user_cannot_reach_the_socket(tmp_path: Path) -> None:
    """The private directory alone keeps other users out (the socket is 0600 too)."""
    with admin_stack(tmp_path) as (_stack, sock):
        probe = (
            "import socket, sys\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            "try:\n"
            f"    s.connect({str(sock)!r})\n"
            "except PermissionError:\n"
            "    sys.exit(13)\n"
        )
        nobody = 65534
        # The system's interpreter: the test's own may sit where that user cannot read.
        python = Path("/usr/bin/python3")
        if os.geteuid() != 0 or not python.exists():
            pytest.skip("needs root (to run as another user) and /usr/bin/python3")
        done = subprocess.run(
            [str(python), "-c", probe], user=nobody, group=nobody, extra_groups=[],
            capture_output=True, timeout=30, check=False, cwd="/",
        )  # fmt: skip
        assert done.returncode == 13, done.stderr


def test_a_silent_client_neither_blocks_others_nor_shutdown(tmp_path: Path) -> None:
    with admin_stack(tmp_path) as (stack, sock):
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        silent.settimeout(10)
        try:
            silent.connect(str(sock))
            assert request(sock, "status")["ok"]  # served meanwhile
            stack.loop.run(stack.relay.stop())
            assert silent.recv(100) == b""  # dropped at shutdown, not left hanging
        finally:
            silent.close()
        stack.relay = RelayServer(stack.config, clock=stack.clock)
        stack.loop.run(stack.relay.start())
