"""The shared store when PostgreSQL goes away (own cluster per test): refused at startup
in one line naming no password; while serving, a safety write fails with 503
cache_unavailable, and the pool reconnects by itself once the server is back."""

from __future__ import annotations

import pytest

from relay.clock import ManualClock
from relay.errors import StoreUnreachable
from relay.settings.database_url import parse_database_url
from relay.storage.postgres.store import PostgresStore
from tests.support.pg_cluster import PgCluster, PgDatabase
from tests.support.pg_store import TARGET, open_pg

SECRET_PASSWORD = "hunter2-do-not-print"


def test_unreachable_at_startup_is_one_line_without_the_password(
    own_pg_cluster: PgCluster,
) -> None:
    own_pg_cluster.stop()
    url = own_pg_cluster.url("postgres").replace("relay@", f"relay:{SECRET_PASSWORD}@")
    with pytest.raises(StoreUnreachable) as refused:
        PostgresStore.open(parse_database_url("REASONING_CACHE_URL", url),
                           clock=ManualClock(), lease_ms=3000)  # fmt: skip
    text = str(refused.value)
    assert "\n" not in text and SECRET_PASSWORD not in text
    assert "REASONING_CACHE_URL" in text and refused.value.code == "cache_unavailable"


def test_a_restart_fails_safety_writes_then_recovers_on_its_own(
    own_pg_cluster: PgCluster,
) -> None:
    database = PgDatabase(own_pg_cluster, own_pg_cluster.create_database())
    with open_pg(database) as store:
        scope = store.scope_for("a" * 64, TARGET).id
        own_pg_cluster.stop()
        with pytest.raises(StoreUnreachable) as failed, store.transaction():
            store.create_intent("intent_1", scope_id=scope, position=1,
                                start_digest="b" * 64, now=1.0)  # fmt: skip
        assert failed.value.status == 503
        own_pg_cluster.start()
        # The pooled connection died with the server: at most one more failure, then a
        # fresh connection (no operator action).
        for _attempt in range(3):
            try:
                with store.transaction():
                    store.create_intent("intent_2", scope_id=scope, position=1,
                                        start_digest="b" * 64, now=1.0)  # fmt: skip
                break
            except StoreUnreachable:
                continue
        assert [i.id for i in store.unresolved_intents()] == ["intent_2"]
        assert store.heartbeat()
