"""The shared PostgreSQL store for tests: open one on a test database (``pg_database``),
and make a lease lapse without waiting for it (tests/unit/storage/postgres)."""

from __future__ import annotations

from relay.clock import ManualClock
from relay.core.scope import ScopeTargeting
from relay.settings.database_url import parse_database_url
from relay.storage.postgres.store import PostgresStore
from tests.support.pg_cluster import PgDatabase

TARGET = ScopeTargeting(credential="cred-fp", model="gpt-5", caller=None)


def open_pg(
    database: PgDatabase, clock: ManualClock | None = None, *, lease_ms: int = 30_000
) -> PostgresStore:
    """A relay instance's store on ``database`` (its own pool and lease)."""
    url = parse_database_url("REASONING_CACHE_URL", database.url)
    return PostgresStore.open(url, clock=clock or ManualClock(), lease_ms=lease_ms)


def lapse(database: PgDatabase, instance_id: str) -> None:
    """The lease of ``instance_id`` runs out now, by the database's clock (what a killed
    instance's lease does once its lease time has passed)."""
    with database.connect() as conn:
        conn.execute(
            "UPDATE instances SET expires_at = clock_timestamp() - interval '1 millisecond' "
            "WHERE id = %s",
            (instance_id,),
        )
