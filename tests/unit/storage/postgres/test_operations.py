"""Operating the shared store: ``relay cache verify`` over one snapshot while it is in
use, backup and restore refused naming PostgreSQL's tools, and a restored copy (a new
database made from the old one) quarantined by the first relay that opens it."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from relay.core.records import EMPTY_PLAN
from relay.core.store_audit import Damage, Note
from relay.ops import cache_commands
from relay.settings.database_url import parse_database_url
from relay.storage.postgres.store import PostgresStore
from relay.storage.postgres.verify import verify_shared
from tests.support.pg_cluster import PgDatabase
from tests.support.pg_store import TARGET, open_pg


def h(n: int) -> str:
    return f"{n:064x}"


def admitted(store: PostgresStore, n: int, text: str) -> int:
    scope = store.scope_for(h(1), TARGET).id
    with store.transaction():
        row = store.add_observation(
            scope_id=scope, generation=1, position=2 * n + 1, start_digest=h(n),
            end_digest=h(1000 + n), envelope_fingerprint=h(2000 + n),
            payload_fingerprint=h(3000 + n), output_hash=h(4000 + n), prior_plan=EMPTY_PLAN,
            intent_id=None, snapshot=None, replayable=True, now=10.0,
        )  # fmt: skip
        store.put_payload(row.id, text, 10.0)
    return row.id


def test_verify_reads_one_snapshot_and_finds_the_damage(pg_database: PgDatabase) -> None:
    with open_pg(pg_database) as store:
        scope = store.scope_for(h(1), TARGET).id
        with store.transaction():
            store.create_intent("intent_1", scope_id=scope, position=9, start_digest=h(9), now=1.0)
        url = parse_database_url("REASONING_CACHE_URL", pg_database.url)
        clean = verify_shared(url)
        assert (clean.tally.records, clean.tally.damaged) == (0, False)
        assert clean.tally.notes == {Note.OPEN_INTENT.value: 1}
        assert clean.to_json()["path"] == str(url) and "@" in str(url)
        tampered = admitted(store, 1, '[{"type":"reasoning"}]')
        with pg_database.connect() as conn:
            conn.execute("UPDATE payloads SET output_json = 'x'::bytea WHERE observation_id = %s",
                         (tampered,))  # fmt: skip
        report = verify_shared(url)
        assert report.tally.records == 1 and report.damaged
        assert Damage.PAYLOAD_DIGEST_MISMATCH.value in report.tally.damage


def test_the_commands_use_the_shared_store_when_it_is_configured(
    pg_database: PgDatabase, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    open_pg(pg_database).close()
    monkeypatch.setenv("REASONING_CACHE_URL", pg_database.url)
    assert cache_commands.run_verify(argparse.Namespace(path=None, json=False)) == 0
    assert "result: clean" in capsys.readouterr().out
    backup = argparse.Namespace(dest=Path("b.dump"), source=None)
    restore = argparse.Namespace(src=Path("b.dump"), dest=None, replace=False)
    for command, args in (
        (cache_commands.run_backup, backup),
        (cache_commands.run_restore, restore),
    ):
        assert command(args) == 1
        err = capsys.readouterr().err
        assert "pg_dump" in err and "pg_restore" in err and err.count("\n") == 1


def test_a_restored_copy_is_quarantined_by_its_first_relay(pg_database: PgDatabase) -> None:
    """``CREATE DATABASE … TEMPLATE`` stands for pg_restore into a new database: the copy
    gets a fresh secret, every generation advances and its open intents are poisoned;
    the original is untouched."""
    with open_pg(pg_database) as store:
        scope = store.scope_for(h(1), TARGET).id
        with store.transaction():
            store.create_intent("intent_1", scope_id=scope, position=9, start_digest=h(9), now=1.0)
        secret = store.secret
    copy = PgDatabase(pg_database.cluster, pg_database.cluster.create_database())
    pg_database.cluster.drop_database(copy.name)
    with pg_database.cluster.connect() as conn:
        conn.execute(f'CREATE DATABASE "{copy.name}" TEMPLATE "{pg_database.name}"'.encode())
    try:
        with open_pg(copy) as restored:
            assert restored.secret != secret
            row = restored.find_scope(h(1))
            assert row is not None and row.generation == 2
            assert restored.poisoned_starts(row.id, [h(9)]) == {h(9)}
            assert restored.unresolved_intents() == []
        with open_pg(copy) as again:  # quarantined once, not at every start
            found = again.find_scope(h(1))
            assert found is not None and found.generation == 2
        with open_pg(pg_database) as original:
            assert original.secret == secret
    finally:
        pg_database.cluster.drop_database(copy.name)
