"""``relay cache backup|restore|verify`` with real processes: ``relay serve`` subprocesses
against one fake upstream (its sealing key outlives every relay restart, so a replay
that is not refused shows in its continuity probe), stopped with SIGTERM; the commands
killed with SIGKILL at every crash point of the copy (relay.crashpoints.BACKUP_POINTS)."""

from __future__ import annotations

import hashlib
import os
import queue
import re
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from fakeupstream.fake import FakeUpstream
from relay.clock import SystemClock
from relay.crashpoints import BACKUP_POINTS, REPLACE_POINTS
from relay.storage.disk_guard import blocked_path, replace_note
from tests.integration.test_cache_relay import continuity
from tests.support.log_leaks import observe_process
from tests.support.relay_cli import relay_env
from tests.support.stack import TOKEN, UPSTREAM_KEY, LoopThread
from tests.support.store_builder import build_store

TIMEOUT = 30.0
EMPTY = hashlib.sha256(b"").hexdigest()


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    loop = LoopThread()
    fake = FakeUpstream(clock=SystemClock(), seed=7)
    loop.run(fake.start("127.0.0.1", 0))
    yield fake
    loop.run(fake.stop())
    loop.close()


def env_for(tmp_path: Path, fake: FakeUpstream | None, **extra: str) -> dict[str, str]:
    base = {"RELAY_TOKEN": TOKEN, "REASONING_CACHE_ENABLED": "1", "RELAY_SSE_KEEPALIVE_MS": "0"}
    if fake is not None:
        base |= {"OPENAI_API_KEY": UPSTREAM_KEY, "OPENAI_BASE_URL": fake.base_url}
    return relay_env(tmp_path, **base, **extra)


class Relay:
    """``relay serve`` as a real process; its output read by threads, so a test waits on
    a line (an event) instead of sleeping."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "relay", "serve"], env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.readers = [
            threading.Thread(target=self._read, args=(stream,), daemon=True)
            for stream in (self.proc.stdout, self.proc.stderr)
        ]
        for reader in self.readers:
            reader.start()
        listening = self.wait_for(r"^relay listening on (\S+)")
        self.base = listening.group(1)

    def _read(self, stream: Any) -> None:
        for line in stream:
            self.lines.put(line)

    def wait_for(self, pattern: str) -> re.Match[str]:
        """The first line so far, or from now on, that matches ``pattern``."""
        regex = re.compile(pattern)
        for line in self.seen:
            if match := regex.search(line):
                return match
        while True:
            line = self.lines.get(timeout=TIMEOUT)
            self.seen.append(line)
            if match := regex.search(line):
                return match

    def chat(self, messages: list[dict[str, Any]]) -> str:
        answer = requests.post(
            f"{self.base}/chat/completions",
            json={"model": "gpt-5", "messages": messages},
            headers={"Authorization": f"Bearer {TOKEN}"}, timeout=TIMEOUT,
        )  # fmt: skip
        assert answer.status_code == 200, answer.text
        return str(answer.json()["choices"][0]["message"]["content"])

    def conversation(self, prompt: str) -> list[dict[str, Any]]:
        text = self.chat([{"role": "user", "content": prompt}])
        return [{"role": "user", "content": prompt}, {"role": "assistant", "content": text},
                {"role": "user", "content": "and then?"}]  # fmt: skip

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(TIMEOUT) == 0
        self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for reader in self.readers:
            reader.join(TIMEOUT)  # the pipes end with the process
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        observe_process("test_cache_backup relay serve", "".join(self.seen), self.env)


@pytest.fixture
def relays() -> Iterator[list[Relay]]:
    started: list[Relay] = []
    yield started
    for relay in started:
        relay.close()


def start(relays: list[Relay], env: dict[str, str]) -> Relay:
    relays.append(Relay(env))
    return relays[-1]


def command(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "relay", *args], env=env, capture_output=True, text=True,
        timeout=TIMEOUT, check=False,
    )  # fmt: skip
    observe_process(f"test_cache_backup relay {args[0]}", done.stdout + done.stderr, env)
    return done


def refuses_to_start(env: dict[str, str]) -> str:
    done = command("serve", env=env)
    assert done.returncode == 1, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def secret(path: Path) -> bytes:
    conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    try:
        (value,) = conn.execute("SELECT value FROM meta WHERE key = 'secret'").fetchone()
    finally:
        conn.close()
    assert isinstance(value, bytes)
    return value


def files(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}


def test_round_trip_quarantines_old_conversations_and_replays_new_ones(
    tmp_path: Path, upstream: FakeUpstream, relays: list[Relay]
) -> None:
    env = env_for(tmp_path, upstream)
    live = tmp_path / "data" / "reasoning-cache.sqlite"  # the default path
    relay = start(relays, env)
    old = relay.conversation("before the backup")
    assert continuity(relay.chat(old)) == (1, 1, 0)  # it replays before
    relay.stop()

    backup, restored = tmp_path / "backups" / "monday.sqlite", tmp_path / "new" / "cache.sqlite"
    made = command("cache", "backup", str(backup), env=env)
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith(f"backup written: {backup} (")
    assert "pages" in made.stderr  # progress (plain lines: stderr is a pipe)
    made = command("cache", "restore", str(backup), str(restored), env=env)
    assert made.returncode == 0, made.stderr
    assert len({secret(live), secret(backup), secret(restored)}) == 3
    for path in (live, backup, restored):
        verified = command("cache", "verify", str(path), env=env)
        assert (verified.returncode, verified.stdout.splitlines()[-1]) == (0, "result: clean")

    for path in (restored, backup):  # either snapshot
        relay = start(relays, env | {"REASONING_CACHE_PATH": str(path),
                                     "REASONING_CACHE_CLEANUP_INTERVAL_MS": "100"})  # fmt: skip
        opened = relay.wait_for(r"cache_opened .*gap_consumed=True generations_advanced=(\d+)")
        assert int(opened.group(1)) >= 1  # every pre-snapshot generation quarantined
        relay.wait_for(r"cache_cleanup run=1 barrier=closed")  # the deletion barrier begins
        assert continuity(relay.chat(old)) == (0, 0, 0)  # quarantined
        new = relay.conversation(f"after restoring {path.name}")
        assert continuity(relay.chat(new)) == (1, 1, 0)  # new ones replay
        relay.stop()
    assert continuity(start(relays, env).chat(old)) == (1, 1, 0)  # the source is as it was


@pytest.mark.parametrize("point", BACKUP_POINTS)
def test_a_killed_backup_leaves_a_blocked_destination_and_the_source_untouched(
    tmp_path: Path, point: str
) -> None:
    source = tmp_path / "data" / "reasoning-cache.sqlite"
    build_store(source, "tct", "c")
    env = env_for(tmp_path, None)
    before = files(source.parent)
    dest = tmp_path / "copies" / "cache.sqlite"
    killed = command("cache", "backup", str(dest), env=env | {"RELAY_TEST_CRASH_AT": point})
    assert killed.returncode == -signal.SIGKILL, killed
    assert killed.stderr.splitlines()[-1] == f"crash_point {point} hit=1 SIGKILL"
    # Untouched: only reading it opened its (empty) write-ahead log, which a kill leaves.
    after = files(source.parent)
    assert after.pop(source.name + "-wal", EMPTY) == EMPTY
    assert after == before, "the source must be untouched"
    assert blocked_path(dest).exists()
    assert dest.exists() == (point == "backup_published")

    # No relay activates the destination, whether the copy got there or not.
    line = refuses_to_start(env | {"REASONING_CACHE_PATH": str(dest)})
    assert line.startswith(f"relay: cannot open the reasoning cache: {blocked_path(dest)} exists")
    assert "run `relay cache backup` or `relay cache restore` again" in line
    assert not dest.exists() or point == "backup_published"
    again = command("cache", "backup", str(dest), env=env)
    assert again.returncode == 1 and "did not finish" in again.stderr
    assert again.stderr.count("\n") == 1

    # What the message says to delete, deleted: the copy is made again and opens.
    for leftover in dest.parent.iterdir():
        leftover.unlink()
    assert command("cache", "backup", str(dest), env=env).returncode == 0
    assert command("cache", "verify", str(dest), env=env).returncode == 0


def test_a_killed_restore_is_blocked_the_same_way(tmp_path: Path) -> None:
    backup = tmp_path / "backup.sqlite"
    build_store(backup, "tt")
    env = env_for(tmp_path, None)
    live = tmp_path / "data" / "reasoning-cache.sqlite"
    killed = command(
        "cache", "restore", str(backup), env=env | {"RELAY_TEST_CRASH_AT": "backup_copying"}
    )
    assert killed.returncode == -signal.SIGKILL
    assert blocked_path(live).exists() and not live.exists()
    line = refuses_to_start(env)  # the default path: the restore's destination
    assert f"{blocked_path(live)} exists" in line
    assert not live.exists(), "the refusal must come before a new store is created"


def test_the_commands_refuse_while_a_relay_owns_the_store(
    tmp_path: Path, upstream: FakeUpstream, relays: list[Relay]
) -> None:
    env = env_for(tmp_path, upstream)
    live = tmp_path / "data" / "reasoning-cache.sqlite"
    relay = start(relays, env)
    relay.conversation("in use")
    expected = f"a relay owns {live}; stop it first"
    for args in (
        ("cache", "backup", str(tmp_path / "b.sqlite")),
        ("cache", "restore", str(live), str(tmp_path / "r.sqlite")),
        ("cache", "verify"),
    ):
        done = command(*args, env=env)
        assert done.returncode == 1, done
        assert done.stderr == f"relay {args[0]} {args[1]}: {expected}\n"
        assert done.stdout == ""
    assert sorted(os.listdir(tmp_path)) == ["data"]  # nothing was made
    assert continuity(relay.chat(relay.conversation("still served"))) == (1, 1, 0)
    relay.stop()


def test_restore_replace_refuses_while_a_relay_owns_the_store(
    tmp_path: Path, upstream: FakeUpstream, relays: list[Relay]
) -> None:
    env = env_for(tmp_path, upstream)
    live = tmp_path / "data" / "reasoning-cache.sqlite"
    backup = tmp_path / "backups" / "monday.sqlite"
    build_store(backup, "tt")
    relay = start(relays, env)
    history = relay.conversation("in use")
    before = sorted(os.listdir(live.parent))
    done = command("cache", "restore", "--replace", str(backup), env=env)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"relay cache restore: a relay owns {live}; stop it first\n"
    assert sorted(os.listdir(live.parent)) == before  # nothing moved, nothing blocks it
    assert continuity(relay.chat(history)) == (1, 1, 0)
    relay.stop()


# Every point a replacing restore passes, in order: its own, then the copy's.
REPLACE_RUN = (*REPLACE_POINTS, "backup_copying", "backup_prepared", "backup_published")


@pytest.mark.parametrize("point", REPLACE_RUN)
def test_a_killed_restore_replace_keeps_the_old_store_and_finishes_when_run_again(
    tmp_path: Path, point: str
) -> None:
    live = tmp_path / "data" / "reasoning-cache.sqlite"
    build_store(live, "tct", "c")
    old_rows = rows_of(live)
    backup = tmp_path / "backups" / "monday.sqlite"
    build_store(backup, "tt")
    env = env_for(tmp_path, None)
    killed = command(
        "cache", "restore", "--replace", str(backup), env=env | {"RELAY_TEST_CRASH_AT": point}
    )
    assert killed.returncode == -signal.SIGKILL, killed
    assert killed.stderr.splitlines()[-1] == f"crash_point {point} hit=1 SIGKILL"
    kept = replace_note(live)
    assert kept is not None and kept.parent == live.parent
    # The old store is whole, at one name or the other; no relay opens the live path.
    assert rows_of(kept if kept.exists() else live) == old_rows
    line = refuses_to_start(env)
    assert "`relay cache restore --replace` into" in line and str(kept) in line
    assert live.exists() == (point in ("replace_blocked", "backup_published"))

    again = command("cache", "restore", "--replace", str(backup), env=env)
    assert again.returncode == 0, again.stderr
    assert f"the store it replaced is kept as {kept} " in again.stdout
    assert not blocked_path(live).exists() and rows_of(kept) == old_rows
    for path in (live, kept):
        verified = command("cache", "verify", str(path), env=env)
        assert (verified.returncode, verified.stdout.splitlines()[-1]) == (0, "result: clean")
    assert rows_of(live) == rows_of(backup)  # the restored copy's records


def rows_of(path: Path) -> list[tuple[Any, ...]]:
    """The store's observations, read as the next opener would (its WAL included)."""
    conn = sqlite3.connect(path)
    try:
        return sorted(conn.execute("SELECT * FROM observations").fetchall(), key=repr)
    finally:
        conn.close()
