"""``relay cache backup|restore|verify`` with real processes: ``relay serve`` subprocesses
against one fake upstream (its sealing key outlives every relay restart, so a replay
that is not refused shows in its continuity probe), stopped with SIGTERM; the commands
killed with SIGKILL at every crash point of the copy (relay.settings.crashpoints.BACKUP_POINTS)."""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fakeupstream.fake import FakeUpstream
from relay.settings.crashpoints import BACKUP_POINTS, REPLACE_POINTS
from relay.storage.disk_guard import blocked_path, replace_note
from tests.support.cache_stack import continuity
from tests.support.log_leaks import observe_process
from tests.support.serve_process import TIMEOUT, Relay, env_for, start
from tests.support.store_builder import build_store

EMPTY = hashlib.sha256(b"").hexdigest()


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


def _empty_database(path: Path) -> None:
    sqlite3.connect(path).close()  # SQLite writes nothing: make it a real (empty) database
    with sqlite3.connect(path) as conn:
        conn.execute("VACUUM")


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda path: path.write_bytes(b""), "is empty: not a relay cache"),
        (
            lambda path: path.write_bytes(b"not sqlite\n" * 100),
            "is not an SQLite database: not a relay cache",
        ),
        (_empty_database, "is an empty SQLite database: not a relay cache"),
    ],
)
def test_verify_tells_a_file_that_is_no_cache_from_an_old_one(
    tmp_path: Path, make: Any, said: str
) -> None:
    path = tmp_path / "reasoning-cache.sqlite"
    make(path)
    before = path.read_bytes()
    done = command("cache", "verify", str(path), env=env_for(tmp_path, None))
    assert done.returncode == 3, done
    assert done.stderr == f"relay cache verify: {path} {said}\n"
    assert "schema version" not in done.stderr and "back it up" not in done.stderr
    assert done.stdout == ""
    # Backup and restore refuse it in the same words (exit 1: refused) and make nothing.
    env = env_for(tmp_path, None, REASONING_CACHE_PATH=str(path))
    for args in (("backup", str(tmp_path / "b.sqlite")),
                 ("restore", str(path), str(tmp_path / "r.sqlite"))):  # fmt: skip
        refused = command("cache", *args, env=env)
        assert refused.returncode == 1, refused
        assert refused.stderr.splitlines()[-1] == f"relay cache {args[0]}: {path} {said}"
    assert path.read_bytes() == before  # looked at, not touched
    assert sorted(os.listdir(tmp_path)) == [path.name]


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
