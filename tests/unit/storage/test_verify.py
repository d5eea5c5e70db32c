"""``relay cache verify`` on real stores made through the cache's own code path: clean
exits 0; each kind of damage, made by hand with the relay stopped, has its code and
exits 1; reclaimed payloads are notes; the output never holds a payload or the secret."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from relay.app.cli import main
from relay.clock import ManualClock
from relay.core.capture import payload_digests
from relay.errors import NotACache, StoreCorrupt, StoreLocked
from relay.storage.replay_store import ReasoningStore
from relay.storage.schema import migrate_to
from relay.storage.verify import verify_store
from tests.support.store_builder import build_store, rewrite_at_version

DAY = 86_400.0


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """A stopped relay's store: a text, tool, text conversation and a two-call one."""
    path = tmp_path / "data" / "cache.sqlite"
    build_store(path, "tct", "cc")
    return path


@pytest.fixture
def raw(store_path: Path) -> Iterator[sqlite3.Connection]:
    """A hand on the file (foreign keys off, as for any sqlite3 client)."""
    conn = sqlite3.connect(store_path, isolation_level=None)
    yield conn
    conn.close()


def run_verify(path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    conn = sqlite3.connect(path)
    (secret,) = conn.execute("SELECT value FROM meta WHERE key = 'secret'").fetchone()
    stored = [row[0] for row in conn.execute("SELECT output_json FROM payloads")]
    conn.close()
    code = main(["cache", "verify", str(path), *args])
    out, err = capsys.readouterr()
    text = out + err
    # Nothing of a payload (ciphertext, text, arguments) or the secret in any output.
    values = {v for payload in stored for v in strings(json.loads(payload)) if len(v) >= 8}
    assert (values or not stored) and not [v for v in values if v in text]
    assert secret.hex() not in text and repr(secret) not in text
    return code, out


def strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


def first_with_parent(conn: sqlite3.Connection) -> tuple[int, int]:
    row = conn.execute(
        "SELECT id, parent_id FROM observations WHERE parent_id IS NOT NULL ORDER BY id"
    ).fetchone()
    return int(row[0]), int(row[1])


def test_a_clean_store_exits_0(store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_verify(store_path, capsys)
    assert code == 0
    assert out.splitlines()[0] == f"verified {store_path} (schema 7): 5 records, 5 payloads"
    assert out.splitlines()[-1] == "result: clean"
    code, out = run_verify(store_path, capsys, "--json")
    report = json.loads(out)
    assert (code, report["clean"], report["damage"], report["records"]) == (0, True, {}, 5)


def flip_payload_byte(conn: sqlite3.Connection) -> int:
    (oid, text) = conn.execute("SELECT observation_id, output_json FROM payloads").fetchone()
    conn.execute(
        "UPDATE payloads SET output_json = ? WHERE observation_id = ?",
        (text.replace("ciphertext", "ciphertexT"), oid),
    )
    return int(oid)


def break_parent_link(conn: sqlite3.Connection) -> int:
    oid, _ = first_with_parent(conn)
    conn.execute("UPDATE observations SET parent_id = 9999 WHERE id = ?", (oid,))
    return oid


def link_to_a_newer_row(conn: sqlite3.Connection) -> int:
    oid, _ = first_with_parent(conn)
    (newest,) = conn.execute("SELECT max(id) FROM observations").fetchone()
    conn.execute("UPDATE observations SET parent_id = ? WHERE id = ?", (newest, oid))
    return oid


def change_prior_chain(conn: sqlite3.Connection) -> int:
    oid, _ = first_with_parent(conn)
    conn.execute("UPDATE observations SET prior_chain = ? WHERE id = ?", ("0" * 64, oid))
    return oid


def delete_payload_unmarked(conn: sqlite3.Connection) -> int:
    (oid,) = conn.execute("SELECT max(observation_id) FROM payloads").fetchone()
    conn.execute("DELETE FROM payloads WHERE observation_id = ?", (oid,))
    return int(oid)


def duplicate_call_id(conn: sqlite3.Connection) -> int:
    """A payload with its call twice under one call id, its digests made to match, so
    that only the pairing is wrong (the newest call block: no child folds its digest)."""
    oid, text = conn.execute(
        "SELECT observation_id, output_json FROM payloads WHERE output_json LIKE "
        "'%function_call%' ORDER BY observation_id DESC"
    ).fetchone()
    items = json.loads(text)
    call = next(item for item in items if item["type"] == "function_call")
    items.append({**call, "id": call["id"] + "_again"})
    doubled = json.dumps(items, separators=(",", ":"))
    fingerprint, output_hash = payload_digests(doubled.encode())
    conn.execute(
        "UPDATE payloads SET output_json = ?, size = ? WHERE observation_id = ?",
        (doubled, len(doubled.encode()), oid),
    )
    conn.execute(
        "UPDATE observations SET payload_fp = ?, output_hash = ? WHERE id = ?",
        (fingerprint, output_hash, oid),
    )
    return int(oid)


@pytest.mark.parametrize(
    ("damage", "codes"),
    [
        (flip_payload_byte, {"payload_digest_mismatch"}),
        (break_parent_link, {"parent_missing", "foreign_key_violation"}),
        (link_to_a_newer_row, {"parent_not_older", "parent_not_below", "chain_mismatch"}),
        (change_prior_chain, {"chain_mismatch"}),
        (delete_payload_unmarked, {"payload_missing"}),
        (duplicate_call_id, {"call_pairing_broken"}),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)  # fmt: skip
def test_each_damage_has_its_code_and_exits_1(
    store_path: Path, raw: sqlite3.Connection, capsys: pytest.CaptureFixture[str],
    damage: Callable[[sqlite3.Connection], int], codes: set[str],
) -> None:  # fmt: skip
    observation = damage(raw)
    raw.close()
    code, out = run_verify(store_path, capsys, "--json")
    report = json.loads(out)
    assert code == 1 and not report["clean"]
    assert set(report["damage"]) == codes, report
    assert observation in report["examples"][sorted(codes - {"foreign_key_violation"})[0]]
    code, text = run_verify(store_path, capsys)
    assert code == 1 and text.splitlines()[-1] == "result: damaged"
    assert all(f"  {c} " in text for c in codes)


def test_a_payload_cleanup_reclaimed_is_a_note_not_damage(
    store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = ManualClock()
    with ReasoningStore.open(store_path, clock=clock) as store:
        result = store.cleanup.reclaim(clock.wall() + 1, now=clock.wall() + 31 * DAY)
    assert result.reclaimed == 5  # a whole idle store, descendants first
    code, out = run_verify(store_path, capsys, "--json")
    report = json.loads(out)
    assert (code, report["damage"], report["notes"]) == (0, {}, {"payload_reclaimed": 5})
    assert report["payloads"] == 0


def test_a_v5_store_is_read_and_its_missing_payloads_are_unprovable(tmp_path: Path) -> None:
    path = tmp_path / "v5.sqlite"
    build_store(path, "tt")
    rewrite_at_version(path, 5)  # v5 kept no reclaim marks
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("DELETE FROM payloads WHERE observation_id = 2")
    conn.close()
    report = verify_store(path)
    assert report.schema_version == 5 and not report.damaged
    assert report.tally.notes == {"payload_gone_before_v6": 1}
    # Migrating (to v6, then v7) marks it so: verify then says the same.
    with ReasoningStore.open(path, clock=ManualClock()):
        pass
    migrated = verify_store(path)
    assert (migrated.schema_version, migrated.tally.notes) == (7, {"payload_gone_before_v6": 1})


def test_a_damaged_file_is_an_integrity_error(store_path: Path) -> None:
    data = bytearray(store_path.read_bytes())
    page = 4096
    data[3 * page : 4 * page] = b"\xa5" * page  # one page of garbage
    store_path.write_bytes(bytes(data))
    report = verify_store(store_path)
    assert report.damaged and "integrity_error" in report.tally.damage


def test_verify_refuses_while_a_relay_owns_the_store(
    store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ReasoningStore.open(store_path, clock=ManualClock()):
        with pytest.raises(StoreLocked, match=r"a relay owns .*; stop it first"):
            verify_store(store_path)
        assert main(["cache", "verify", str(store_path)]) == 1
        err = capsys.readouterr().err
        assert err == f"relay cache verify: a relay owns {store_path}; stop it first\n"


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache", "verify", str(tmp_path / "nothing.sqlite")]) == 2
    assert "there is no reasoning cache at" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["cache", "verify", "a", "b"])
    assert exited.value.code == 2


def test_the_default_path_is_the_configured_one(
    store_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REASONING_CACHE_PATH", str(store_path))
    assert main(["cache", "verify"]) == 0
    assert f"verified {store_path} " in capsys.readouterr().out
    monkeypatch.setenv("RELAY_DATA_DIR", str(store_path.parent))
    monkeypatch.delenv("REASONING_CACHE_PATH")
    assert main(["cache", "verify"]) == 2  # <data dir>/reasoning-cache.sqlite: none there


def test_a_foreign_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA application_id = 7")
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    with pytest.raises(NotACache, match="another application"):
        verify_store(path)
    old = tmp_path / "v4.sqlite"
    conn = sqlite3.connect(old, isolation_level=None)
    migrate_to(conn, 4)
    conn.close()
    with pytest.raises(StoreCorrupt, match="schema version 4") as refused:
        verify_store(old)
    assert not isinstance(refused.value, NotACache)  # a relay cache, only an old one


def test_a_latched_or_blocked_store_is_still_verified_with_a_note(
    store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Checking a latched store is step 3 of the latch procedure (docs/replay-cache.md,
    *Disk pressure*)."""
    for suffix, meaning in ((".guard", "the cache latched"), (".blocked", "did not finish")):
        latch = store_path.with_name(store_path.name + suffix)
        latch.write_bytes(b"")
        assert main(["cache", "verify", str(store_path)]) == 0
        out, err = capsys.readouterr()
        assert out.splitlines()[-1] == "result: clean"
        assert f"note: {latch} exists: " in err and meaning in err
        latch.unlink()
    assert main(["cache", "verify", str(store_path)]) == 0
    assert capsys.readouterr().err.count("note:") == 0
