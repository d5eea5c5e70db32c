"""The one SQLite copy engine (relay.storage.sqlite_copy) on real files; its two callers
are tested end to end in test_backup.py and tests/unit/ops/test_snapshot.py."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from relay.errors import SnapshotRefused
from relay.storage.sqlite_copy import (
    COPY,
    OPEN_COPY,
    CopyFailed,
    check_room,
    copy_failed,
    copy_pages,
    create_private,
    fsync_file,
    make_inspection_export,
    publish,
)


def source_db(path: Path, rows: int = 200) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value ANY) STRICT")
    conn.execute("INSERT INTO meta VALUES ('secret', x'0123456789abcdef')")
    conn.execute("CREATE TABLE t (n INTEGER, text TEXT)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(n, "x" * 500) for n in range(rows)])
    return conn


def test_a_copy_is_whole_in_steps_and_each_step_waits_its_turn(tmp_path: Path) -> None:
    conn = source_db(tmp_path / "src.sqlite")
    total = conn.execute("PRAGMA page_count").fetchone()[0]
    target = create_private(tmp_path / "copy.sqlite")
    events: list[object] = []
    copied = copy_pages(
        conn, target, pages=4,
        stepped=lambda remaining, count: events.append((remaining, count)),
        wait_turn=lambda: events.append("turn"),
    )  # fmt: skip
    assert copied == total
    steps = [e for e in events if e != "turn"]
    assert len(steps) == -(-total // 4) and steps[-1] == (0, total)
    # A turn before the first step and between steps, none after the last.
    assert events[0] == "turn" and events[-1] == (0, total)
    assert events.count("turn") == len(steps)
    copy = sqlite3.connect(target)
    assert copy.execute("SELECT count(*) FROM t").fetchone()[0] == 200


@pytest.mark.parametrize(
    ("target", "step", "message"),
    [
        ("missing-dir/copy.sqlite", OPEN_COPY, "cannot open the copy (SQLITE_CANTOPEN)"),
        ("not-a-db", COPY, "the online backup failed (SQLITE_NOTADB)"),
    ],
)
def test_a_failed_step_goes_through_the_callers_translation(
    tmp_path: Path, target: str, step: str, message: str
) -> None:
    conn = source_db(tmp_path / "src.sqlite", rows=1)
    (tmp_path / "not-a-db").write_bytes(b"\xa5" * 4096)
    seen: list[str] = []

    def failed(exc: sqlite3.Error, where: str) -> Exception:
        seen.append(where)
        return copy_failed(exc, where)

    with pytest.raises(CopyFailed) as raised:
        copy_pages(conn, tmp_path / target, pages=8, stepped=lambda r, t: None, failed=failed)
    assert (seen, str(raised.value)) == ([step], message)


def test_publish_never_replaces_and_leaves_one_name(tmp_path: Path) -> None:
    temp = create_private(tmp_path / ".partial-1")
    temp.write_bytes(b"copy")
    fsync_file(temp, read_only=True)
    assert stat.S_IMODE(os.stat(temp).st_mode) == 0o400
    taken = tmp_path / "final"
    taken.write_bytes(b"earlier")
    with pytest.raises(FileExistsError):
        publish(temp, taken)
    assert taken.read_bytes() == b"earlier" and temp.exists()
    linked: list[bool] = []
    publish(temp, tmp_path / "free", linked=lambda: linked.append(temp.exists()))
    assert linked == [True] and not temp.exists()
    assert (tmp_path / "free").read_bytes() == b"copy"


def test_the_destination_checks_refuse_with_a_code(tmp_path: Path) -> None:
    (tmp_path / "there").write_bytes(b"")
    with pytest.raises(SnapshotRefused) as refused:
        create_private(tmp_path / "there")
    assert refused.value.code == "directory_unusable"
    with pytest.raises(SnapshotRefused) as refused:
        check_room(tmp_path, 1 << 62, 64)
    assert refused.value.code == "no_space" and "plus 64" in str(refused.value)
    check_room(tmp_path, 0, 0)


def test_an_inspection_export_has_no_secret_left_anywhere(tmp_path: Path) -> None:
    conn = source_db(tmp_path / "src.sqlite", rows=20)
    conn.execute("PRAGMA journal_mode = WAL")
    target = create_private(tmp_path / "copy.sqlite")
    copy_pages(conn, target, pages=64, stepped=lambda r, t: None)
    make_inspection_export(target, marked_at=12.5)
    copy = sqlite3.connect(target)
    assert dict(copy.execute("SELECT key, value FROM meta")) == {
        "inspection-copy": 12.5, "coverage-gap": 1,
    }  # fmt: skip
    assert copy.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert bytes.fromhex("0123456789abcdef") not in target.read_bytes()
