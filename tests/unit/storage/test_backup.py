"""Offline backup and restore (relay.storage.backup) on real stores made through the
cache's code path: a new file with every row, a fresh secret, a coverage gap and its
intents recovered; destinations never overwritten; refusals while a relay owns, a guard
latches or a copy is unfinished; a failed copy leaves nothing; the source is only read.
(Kills at every step, with real processes: tests/integration/test_cache_backup.py.)"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest

from relay.app.cli import main
from relay.cache.replay_cache import ReplayCache
from relay.clock import ManualClock
from relay.core.disk_policy import MIN_RESERVE_BYTES
from relay.core.records import MarkerKind
from relay.errors import SnapshotRefused, StoreBlocked, StoreCorrupt, StoreLatched, StoreLocked
from relay.settings.config import Config
from relay.settings.model_alias import ModelAlias
from relay.storage.backup import (
    ReplaceResult,
    SnapshotKind,
    destination_siblings,
    make_snapshot,
    replace_with_snapshot,
)
from relay.storage.disk_guard import blocked_path, guard_path
from relay.storage.recovery import COVERAGE_GAP_KEY
from relay.storage.replay_store import ReasoningStore
from relay.storage.verify import verify_store
from relay.translate.request import translate_request
from tests.support.store_builder import StoreBuilder, build_store, rewrite_at_version

ROWS = ("scopes", "observations", "payloads", "markers")


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "live" / "cache.sqlite"
    build_store(path, "tct", "c")
    return path


def rows(path: Path, table: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True)  # leaves no -shm behind
    try:
        return sorted(conn.execute(f"SELECT * FROM {table}").fetchall(), key=repr)
    finally:
        conn.close()


def meta(path: Path) -> dict[str, Any]:
    return dict(rows(path, "meta"))


def files(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}


def backup(source: Path, dest: Path, **kwargs: Any) -> Any:
    return make_snapshot(source, dest, kind=SnapshotKind.BACKUP, clock=ManualClock(), **kwargs)


def test_a_backup_is_a_new_store_with_every_row(source: Path, tmp_path: Path) -> None:
    before = files(source.parent)
    dest = tmp_path / "backups" / "one.sqlite"
    seen: list[tuple[int, int]] = []
    result = backup(source, dest, progress=lambda done, total: seen.append((done, total)))
    assert files(source.parent) == before, "the source is only read"
    assert result.path == dest and result.bytes == dest.stat().st_size
    assert seen[-1] == (result.pages, result.pages)
    for table in ROWS:
        assert rows(dest, table) == rows(source, table), table
    old, new = meta(source), meta(dest)
    assert len(new["secret"]) == len(old["secret"]) and new["secret"] != old["secret"]
    assert new[COVERAGE_GAP_KEY] == 1 and new["snapshot"] == "backup"
    assert COVERAGE_GAP_KEY not in old
    assert sorted(p.name for p in dest.parent.iterdir()) == ["one.sqlite"]  # nothing else
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    assert stat.S_IMODE(dest.parent.stat().st_mode) == 0o700
    assert not verify_store(dest).damaged


def test_the_copy_recovers_open_intents_and_the_source_keeps_them(
    source: Path, tmp_path: Path
) -> None:
    builder = StoreBuilder(source)
    history = builder.conversation("t", prompt="in flight")
    body = {"model": "gpt-5", "messages": history}
    request = translate_request(body, ModelAlias("gpt-5", "gpt-5"), reasoning_summaries=False)
    session = builder.cache.begin(request, body, "req_killed")
    assert session is not None
    session.dispatch()  # ... and the relay is killed: the intent stays
    builder.close()
    (intent,) = rows(source, "intents")
    dest = tmp_path / "one.sqlite"
    assert backup(source, dest).recovered_intents == 1
    assert rows(dest, "intents") == [] and rows(source, "intents") == [intent]
    poisoned = {(r[0], r[2]) for r in rows(dest, "markers") if r[1] == MarkerKind.START_POISON}
    assert (intent[1], intent[4]) in poisoned  # (scope, start digest) of the intent


def test_opening_a_copy_quarantines_what_came_before(source: Path, tmp_path: Path) -> None:
    clock = ManualClock()
    dest = tmp_path / "one.sqlite"
    make_snapshot(source, dest, kind=SnapshotKind.RESTORE, clock=clock)
    generations = {row[1]: row[2] for row in rows(dest, "scopes")}
    config = Config(reasoning_cache_enabled=True, reasoning_cache_path=dest,
                    reasoning_cache_reserve_bytes=MIN_RESERVE_BYTES)  # fmt: skip
    cache = ReplayCache.open(config, clock, upstream_url="https://api.openai.com/v1/responses",
                             upstream_credential="sk-test", relay_token="relay-token",
                             new_id=str)  # fmt: skip
    cache.close()
    assert {row[1]: row[2] for row in rows(dest, "scopes")} == {
        digest: generation + 1 for digest, generation in generations.items()
    }
    assert COVERAGE_GAP_KEY not in meta(dest)  # consumed


@pytest.mark.parametrize("sibling", range(7))
def test_a_destination_or_any_sibling_is_never_touched(
    source: Path, tmp_path: Path, sibling: int
) -> None:
    dest = tmp_path / "one.sqlite"
    there = destination_siblings(dest)[sibling]
    there.write_bytes(b"someone's")
    with pytest.raises(SnapshotRefused) as refused:
        backup(source, dest)
    assert str(there) in str(refused.value) and "\n" not in str(refused.value)
    # The one SnapshotRefused of relay.errors, with a code, as the admin snapshot's.
    assert refused.value.code == ("destination_blocked" if there.suffix == ".blocked"
                                  else "destination_exists")  # fmt: skip
    assert there.read_bytes() == b"someone's"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["live", there.name])


def test_an_unfinished_copy_blocks_the_destination_and_says_what_to_do(
    source: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "one.sqlite"
    blocked_path(dest).write_bytes(b"")
    with pytest.raises(
        SnapshotRefused, match=r"did not finish, so it may be incomplete; delete .*\.partial-\*"
    ):
        backup(source, dest)
    # A relay refuses the store while .blocked is there, whether or not the file is.
    for enabled in (True, False):
        if not enabled:
            dest.write_bytes(b"")  # caching off opens an existing file (the gap): refused too
        config = Config(reasoning_cache_enabled=enabled, reasoning_cache_path=dest)
        with pytest.raises(StoreBlocked, match=r"\.blocked exists: a backup or restore into"):
            ReplayCache.open(config, ManualClock(), upstream_url="https://x/v1/responses",
                             upstream_credential="k", relay_token="t", new_id=str)  # fmt: skip
        if enabled:
            assert not dest.exists()  # refused before the open could create it
        else:
            assert dest.read_bytes() == b""  # untouched


def test_a_source_a_relay_owns_latched_or_blocked_is_refused(source: Path, tmp_path: Path) -> None:
    dest = tmp_path / "one.sqlite"
    with (
        ReasoningStore.open(source, clock=ManualClock()),
        pytest.raises(StoreLocked, match=f"a relay owns {source}; stop it first"),
    ):
        backup(source, dest)
    for latch, error in ((guard_path(source), StoreLatched), (blocked_path(source), StoreBlocked)):
        latch.write_bytes(b"")
        with pytest.raises(error):
            backup(source, dest)
        latch.unlink()
    assert not dest.exists() and not blocked_path(dest).exists()
    foreign = tmp_path / "foreign.sqlite"
    conn = sqlite3.connect(foreign)
    conn.execute("PRAGMA application_id = 7")
    conn.close()
    with pytest.raises(StoreCorrupt, match="another application"):
        backup(foreign, dest)


def test_a_failed_copy_leaves_nothing_behind(source: Path, tmp_path: Path) -> None:
    dest = tmp_path / "out" / "one.sqlite"
    before = files(source.parent)

    def fail(done: int, total: int) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        backup(source, dest, progress=fail)
    assert list(dest.parent.iterdir()) == []
    assert files(source.parent) == before


def test_a_v5_source_gives_a_current_copy_and_stays_v5(tmp_path: Path) -> None:
    source = tmp_path / "v5.sqlite"
    build_store(source, "tt")
    rewrite_at_version(source, 5)
    conn = sqlite3.connect(source, isolation_level=None)
    conn.execute("DELETE FROM payloads WHERE observation_id = 2")
    conn.close()
    dest = tmp_path / "one.sqlite"
    assert backup(source, dest).schema_from == 5
    version = sqlite3.connect(source).execute("PRAGMA user_version").fetchone()[0]
    assert version == 5
    report = verify_store(dest)
    assert report.schema_version == 7 and report.tally.notes == {"payload_gone_before_v6": 1}


def test_the_commands(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("REASONING_CACHE_PATH", str(source))
    backup_file, live = tmp_path / "b.sqlite", tmp_path / "restored" / "cache.sqlite"
    assert main(["cache", "backup", str(backup_file)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"backup written: {backup_file} (") and "pages" in err
    assert main(["cache", "backup", str(backup_file)]) == 1  # never over an existing file
    assert capsys.readouterr().err.count("\n") == 1
    monkeypatch.setenv("REASONING_CACHE_PATH", str(live))  # restore's default DEST
    assert main(["cache", "restore", str(backup_file)]) == 0
    assert capsys.readouterr().out.startswith(f"restore written: {live} (")
    assert meta(live)["snapshot"] == "restore"
    assert len({meta(p)["secret"] for p in (source, backup_file, live)}) == 3
    assert main(["cache", "restore", str(tmp_path / "none.sqlite"), str(tmp_path / "x")]) == 2
    with pytest.raises(SystemExit) as usage:
        main(["cache", "backup"])
    assert usage.value.code == 2


def test_a_destination_that_appears_meanwhile_is_left_alone(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest = tmp_path / "one.sqlite"
    real_link = os.link

    def someone_else_first(src: Any, dst: Any) -> None:
        Path(dst).write_bytes(b"someone's")
        real_link(src, dst)  # FileExistsError, as the kernel says

    monkeypatch.setattr(os, "link", someone_else_first)
    with pytest.raises(SnapshotRefused, match="appeared meanwhile; it was left alone"):
        backup(source, dest)
    assert dest.read_bytes() == b"someone's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["live", "one.sqlite"]  # no .blocked


# --- restore --replace ---------------------------------------------------------------


def kept_stores(live: Path) -> list[Path]:
    """The stores a replacing restore moved aside beside ``live`` (not their sidecars)."""
    return [p for p in live.parent.iterdir() if re.search(r"\.replaced-[0-9TZ]+$", p.name)]


def replace(backup_file: Path, live: Path, **kwargs: Any) -> ReplaceResult:
    return replace_with_snapshot(
        backup_file, live, clock=ManualClock(wall=1_700_000_000.0), **kwargs
    )


@pytest.fixture
def backup_file(source: Path, tmp_path: Path) -> Path:
    path = tmp_path / "backups" / "monday.sqlite"
    backup(source, path)
    return path


def test_replace_keeps_the_live_store_and_publishes_the_copy(
    source: Path, backup_file: Path
) -> None:
    before = {table: rows(source, table) for table in ROWS}
    old_secret = meta(source)["secret"]
    guard_path(source).write_text('{"what": "fence", "code": "SQLITE_FULL", "at": 1}')
    old_files = sorted(p.name for p in source.parent.iterdir())  # its .reserve too
    result = replace(backup_file, source)
    kept = result.kept
    assert kept is not None and kept.parent == source.parent
    assert kept.name == "cache.sqlite.replaced-20231114T221320Z"
    assert {table: rows(kept, table) for table in ROWS} == before  # every row kept
    assert meta(kept)["secret"] == old_secret
    assert guard_path(kept).exists() and not guard_path(source).exists()  # its latch with it
    assert result.snapshot is not None and result.snapshot.path == source
    restored = meta(source)
    assert restored["snapshot"] == "restore" and restored[COVERAGE_GAP_KEY] == 1
    assert restored["secret"] not in (old_secret, meta(backup_file)["secret"])
    assert not blocked_path(source).exists()
    assert sorted(p.name for p in source.parent.iterdir()) == sorted(
        ["cache.sqlite", *(name.replace("cache.sqlite", kept.name) for name in old_files)]
    )
    assert not verify_store(source).damaged and not verify_store(kept).damaged
    again = replace(backup_file, source)  # a second time: another kept name, nothing lost
    assert again.kept is not None and again.kept != kept and again.kept.exists()


def test_replace_refuses_while_a_relay_owns_the_live_store(source: Path, backup_file: Path) -> None:
    before = files(source.parent)
    with (
        ReasoningStore.open(source, clock=ManualClock()),
        pytest.raises(StoreLocked, match=f"a relay owns {source}; stop it first"),
    ):
        replace(backup_file, source)
    assert files(source.parent) == before, "nothing moved, nothing written"
    assert not blocked_path(source).exists(), "nothing moved: nothing blocks the store"


def test_replace_without_a_live_store_is_a_restore(backup_file: Path, tmp_path: Path) -> None:
    live = tmp_path / "new" / "cache.sqlite"
    result = replace(backup_file, live)
    assert result.kept is None and meta(live)["snapshot"] == "restore"


def test_replace_refuses_the_live_store_as_its_source(source: Path) -> None:
    with pytest.raises(SnapshotRefused, match="is the live store itself"):
        replace(source, source)
    assert not blocked_path(source).exists()


def test_a_replace_that_failed_after_the_move_blocks_and_finishes_when_run_again(
    source: Path, backup_file: Path
) -> None:
    before = rows(source, "observations")

    def fail(done: int, total: int) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        replace(backup_file, source, progress=fail)
    assert not source.exists() and blocked_path(source).exists()
    [kept] = kept_stores(source)
    assert rows(kept, "observations") == before
    # No relay opens the live path meanwhile (it would create an empty store there), and
    # the message never says to delete anything.
    config = Config(reasoning_cache_enabled=True, reasoning_cache_path=source)
    with pytest.raises(StoreBlocked) as refused:
        ReplayCache.open(config, ManualClock(), upstream_url="https://x/v1/responses",
                         upstream_credential="k", relay_token="t", new_id=str)  # fmt: skip
    message = str(refused.value)
    assert "restore --replace" in message and str(kept) in message and "delete" not in message
    with pytest.raises(SnapshotRefused, match="run the same `relay cache restore --replace"):
        backup(backup_file, source)  # nor a plain copy into it
    result = replace(backup_file, source)  # run again: picks up where it stopped
    assert result.kept == kept and meta(source)["snapshot"] == "restore"
    assert not blocked_path(source).exists()
    assert rows(kept, "observations") == before


def test_the_restore_command_replaces(
    source: Path, backup_file: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("REASONING_CACHE_PATH", str(source))
    assert main(["cache", "restore", str(backup_file)]) == 1  # the live store exists
    assert "--replace" in capsys.readouterr().err
    assert main(["cache", "restore", "--replace", str(backup_file)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"restore written: {source} (")
    [kept] = kept_stores(source)
    assert out[1].startswith(f"the store it replaced is kept as {kept} ")
