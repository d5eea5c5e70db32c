"""relay.ops.cache_commands: the ``relay cache`` sub-commands' own logic -- their parser,
exit codes, the lines they print for success, refusal and OS errors, and the verify
report's text -- on real stores in temp dirs (the copy and the audit themselves are
tests/unit/storage/test_backup.py and test_verify.py)."""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

import pytest

from relay.core.store_audit import AuditTally, Damage, Note
from relay.ops import cache_commands
from relay.ops.cache_commands import NOT_A_CACHE, USAGE, render
from relay.storage.disk_guard import blocked_path, guard_path
from relay.storage.verify import VerifyReport
from tests.support.store_builder import build_store


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="relay")
    cache_commands.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["cache", *argv])


def run(*argv: str) -> int:
    args = parse(*argv)
    code: int = args.run(args)
    return code


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "live.sqlite"
    build_store(path, "tc")
    return path


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The configuration the commands read when given no path: this test's own."""
    for name in ("REASONING_CACHE_PATH", "REASONING_CACHE_URL", "RELAY_DATA_DIR", "RELAY_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RELAY_DATA_DIR", str(tmp_path / "data"))


@pytest.mark.parametrize(
    ("argv", "runner", "fields"),
    [
        (["backup", "b.sqlite"], "run_backup", {"dest": Path("b.sqlite"), "source": None}),
        (["backup", "b.sqlite", "--source", "s.sqlite"], "run_backup",
         {"dest": Path("b.sqlite"), "source": Path("s.sqlite")}),
        (["restore", "b.sqlite"], "run_restore",
         {"src": Path("b.sqlite"), "dest": None, "replace": False}),
        (["restore", "--replace", "b.sqlite", "live.sqlite"], "run_restore",
         {"src": Path("b.sqlite"), "dest": Path("live.sqlite"), "replace": True}),
        (["verify"], "run_verify", {"path": None, "json": False}),
        (["verify", "x.sqlite", "--json"], "run_verify", {"path": Path("x.sqlite"), "json": True}),
    ],
)  # fmt: skip
def test_each_sub_command_parses_to_its_runner(
    argv: list[str], runner: str, fields: dict[str, object]
) -> None:
    args = parse(*argv)
    assert args.run is getattr(cache_commands, runner)
    assert {name: getattr(args, name) for name in fields} == fields


@pytest.mark.parametrize("argv", [[], ["backup"], ["restore"], ["verify", "a", "b"], ["copy"]])
def test_a_malformed_command_line_is_a_usage_error(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        parse(*argv)
    assert caught.value.code == USAGE


@pytest.mark.parametrize(
    "argv",
    [["backup", "{tmp}/b.sqlite", "--source", "{tmp}/none.sqlite"],
     ["restore", "{tmp}/none.sqlite", "{tmp}/new.sqlite"],
     ["restore", "--replace", "{tmp}/none.sqlite", "{tmp}/new.sqlite"],
     ["verify", "{tmp}/none.sqlite"]],
)  # fmt: skip
def test_a_missing_source_is_a_usage_error_that_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert run(*(a.format(tmp=tmp_path) for a in argv)) == USAGE
    assert f"there is no reasoning cache at {tmp_path}/none.sqlite" in capsys.readouterr().err
    assert not (tmp_path / "new.sqlite").exists() and not (tmp_path / "b.sqlite").exists()


@pytest.mark.parametrize("argv", [["backup", "b.sqlite"], ["restore", "b.sqlite"], ["verify"]])
def test_a_bad_configuration_is_a_usage_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    monkeypatch.setenv("RELAY_PORT", "not-a-port")
    assert run(*argv) == USAGE
    err = capsys.readouterr().err
    assert ": configuration error: " in err and "RELAY_PORT" in err


def test_the_configured_path_is_the_default(
    store: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REASONING_CACHE_PATH", str(store))
    assert run("verify") == 0
    assert f"verified {store} " in capsys.readouterr().out


def test_backup_then_restore_print_what_they_wrote(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backup, restored = tmp_path / "backup.sqlite", tmp_path / "restored.sqlite"
    assert run("backup", str(backup), "--source", str(store)) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"backup written: {backup} (")
    assert f"({backup.stat().st_size} bytes, " in out
    assert "it has a new cache secret" in out and "poisoned" not in out
    assert run("restore", str(backup), str(restored)) == 0
    assert capsys.readouterr().out.startswith(f"restore written: {restored} (")
    assert run("verify", str(restored)) == 0


def test_a_refused_copy_exits_1_with_one_line(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    taken = tmp_path / "taken.sqlite"
    taken.write_bytes(b"someone's file")
    assert run("backup", str(taken), "--source", str(store)) == 1
    err = capsys.readouterr().err.splitlines()
    refusal = [line for line in err if line.startswith("relay cache backup: ")]
    assert refusal == [refusal[-1]] and "exists" in refusal[-1]
    assert taken.read_bytes() == b"someone's file"


def test_an_os_error_names_the_file_and_the_reason(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parent = tmp_path / "file-not-dir"
    parent.write_text("x")
    assert run("backup", str(parent / "sub" / "b.sqlite"), "--source", str(store)) == 1
    err = capsys.readouterr().err
    assert "relay cache backup: " in err and str(parent) in err


def test_restore_replace_keeps_the_store_it_replaced(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backup = tmp_path / "backup.sqlite"
    assert run("backup", str(backup), "--source", str(store)) == 0
    capsys.readouterr()
    assert run("restore", "--replace", str(backup), str(store)) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"restore written: {store} (")
    kept = out.split("the store it replaced is kept as ", 1)[1].split(" ", 1)[0]
    assert Path(kept).is_file() and Path(kept) != store
    assert "nothing was deleted" in out


def test_verify_exit_codes_and_both_report_forms(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("verify", str(store)) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[-1] == "result: clean"
    assert run("verify", str(store), "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["clean"] is True and report["records"] > 0
    conn = sqlite3.connect(store)
    with conn:
        conn.execute("UPDATE payloads SET size = size + 1")
    conn.close()
    assert run("verify", str(store)) == 1
    assert "result: damaged" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "code"),
    [(b"", NOT_A_CACHE), (b"plain text, not SQLite" * 100, NOT_A_CACHE)],
    ids=["empty", "not-sqlite"],
)
def test_a_file_that_is_no_cache_exits_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, code: int
) -> None:
    path = tmp_path / "other.sqlite"
    path.write_bytes(content)
    assert run("verify", str(path)) == code
    assert "relay cache verify: " in capsys.readouterr().err


@pytest.mark.parametrize(
    ("sibling", "meaning"),
    [(guard_path, "the cache latched"), (blocked_path, "did not finish")],
    ids=["guard", "blocked"],
)
def test_verify_notes_a_latched_or_blocked_store(
    store: Path, capsys: pytest.CaptureFixture[str], sibling: object, meaning: str
) -> None:
    assert callable(sibling)
    marker = sibling(store)
    marker.write_text("")
    assert run("verify", str(store)) == 0
    err = capsys.readouterr().err
    assert f"relay cache verify: note: {marker} exists: " in err and meaning in err


def tally(records: int, payloads: int, *codes: tuple[Damage | Note, int | None]) -> AuditTally:
    counted = AuditTally(records=records, payloads=payloads)
    for code, observation_id in codes:
        counted.add(code, observation_id=observation_id)
    return counted


@pytest.mark.parametrize(
    ("counted", "lines"),
    [
        (tally(3, 2), ["damage: none", "notes: none", "result: clean"]),
        (tally(3, 1, (Note.PAYLOAD_RECLAIMED, None)),
         ["damage: none", "notes:", "  payload_reclaimed 1", "result: clean"]),
        (tally(4, 4, (Damage.PAYLOAD_DIGEST_MISMATCH, 7), (Damage.PAYLOAD_DIGEST_MISMATCH, 9),
               (Damage.INTEGRITY_ERROR, None), (Note.OPEN_INTENT, None)),
         ["damage:", "  integrity_error 1", "  payload_digest_mismatch 2 (observations 7, 9)",
          "notes:", "  open_intent 1", "result: damaged"]),
    ],
    ids=["clean", "notes-only", "damaged"],
)  # fmt: skip
def test_the_text_report(counted: AuditTally, lines: list[str]) -> None:
    text = render(VerifyReport(Path("/x/cache.sqlite"), 6, counted))
    head, *rest = text.splitlines()
    assert head == (
        f"verified /x/cache.sqlite (schema 6): {counted.records} records, "
        f"{counted.payloads} payloads"
    )
    assert sorted(rest) == sorted(lines)
    assert rest[-1] == lines[-1]
    assert rest.index(lines[0]) < rest.index(next(x for x in lines if x.startswith("notes")))
