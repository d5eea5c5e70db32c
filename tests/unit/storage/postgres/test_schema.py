"""The shared store's schema (relay.storage.postgres.schema): created by the first relay,
migrated under an advisory lock, and a database newer than the relay refused in one line."""

from __future__ import annotations

import pytest

from relay.errors import StoreCorrupt
from relay.storage.postgres.schema import SCHEMA_VERSION, TABLES
from tests.support.pg_cluster import PgDatabase
from tests.support.pg_store import open_pg


def version(database: PgDatabase) -> int:
    with database.connect() as conn:
        row = conn.execute("SELECT version FROM relay_schema").fetchone()
    assert row is not None
    return int(row[0])


def test_the_first_relay_creates_the_schema_and_the_next_reuses_it(
    pg_database: PgDatabase,
) -> None:
    with open_pg(pg_database) as first:
        secret = first.secret
    assert version(pg_database) == SCHEMA_VERSION
    with open_pg(pg_database) as second:
        assert second.secret == secret
        assert second.integrity_check() == ["ok"]
        assert set(second.stats()) == {*TABLES, "payload_bytes"}


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("UPDATE relay_schema SET version = version + 1", "written by a newer relay"),
        ("DROP TABLE relay_schema", "no relay_schema version"),
    ],
    ids=["newer", "unversioned"],
)
def test_a_database_the_relay_cannot_use_is_refused_in_one_line(
    pg_database: PgDatabase, setup: str, message: str
) -> None:
    open_pg(pg_database).close()
    with pg_database.connect() as conn:
        conn.execute(setup.encode())
    with pytest.raises(StoreCorrupt, match=message) as refused:
        open_pg(pg_database)
    text = str(refused.value)
    assert "\n" not in text and "REASONING_CACHE_URL" in text
    assert refused.value.status == 503 and refused.value.code == "cache_unavailable"
