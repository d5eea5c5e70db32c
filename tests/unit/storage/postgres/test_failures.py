"""The shared store when PostgreSQL goes away (own cluster per test): refused at startup
in one line naming no password; while serving, a safety write fails with 503
cache_unavailable (at once while the database is known down), a background probe
reconnects once the server is back, and intents the outage left open are poisoned by the
instance's own next heartbeat."""

from __future__ import annotations

import functools

import pytest

from relay.cache.shared_store import LeaseKeeper, SharedSafety
from relay.clock import ManualClock
from relay.core.records import MarkerKind
from relay.errors import StoreUnreachable
from relay.settings.database_url import parse_database_url
from relay.storage.postgres.store import PostgresStore
from tests.support.pg_cluster import PgCluster, PgDatabase
from tests.support.pg_store import TARGET, open_pg, probe_now

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
    clock = ManualClock()
    with open_pg(database, clock) as store:
        scope = store.scope_for("a" * 64, TARGET).id
        own_pg_cluster.stop()
        with pytest.raises(StoreUnreachable) as failed, store.transaction():
            store.create_intent("intent_1", scope_id=scope, position=1,
                                start_digest="b" * 64, now=1.0)  # fmt: skip
        assert failed.value.status == 503
        own_pg_cluster.start()
        # Known down: refused at once, with no connect attempt, until a probe answers.
        with pytest.raises(StoreUnreachable) as refused, store.transaction():
            pass
        assert "probes it in the background" in str(refused.value)
        probe_now(store, clock)
        with store.transaction():
            store.create_intent("intent_2", scope_id=scope, position=1,
                                start_digest="b" * 64, now=1.0)  # fmt: skip
        assert [i.id for i in store.unresolved_intents()] == ["intent_2"]
        assert store.heartbeat()


def open_intent(store: PostgresStore, scope: int, intent: str, start: str) -> None:
    with store.transaction():
        store.create_intent(intent, scope_id=scope, position=1, start_digest=start, now=1.0)


def resolve(store: PostgresStore, scope: int, intent: str) -> None:
    with store.transaction():
        store.add_marker(scope, MarkerKind.START_POISON, "e" * 64, 1, 1.0)
        store.delete_intent(intent)


def test_an_intent_whose_resolution_failed_in_an_outage_is_poisoned_when_it_is_back(
    own_pg_cluster: PgCluster,
) -> None:
    """The instance lives on: its own heartbeat, not a survivor, poisons and removes the
    intents it could not resolve; one resolved meanwhile is only forgotten."""
    database = PgDatabase(own_pg_cluster, own_pg_cluster.create_database())
    clock = ManualClock()
    stuck, later = "c" * 64, "d" * 64
    with open_pg(database, clock) as store:
        keeper = LeaseKeeper(store, clock, barrier_cutoff=lambda: None)
        safety = SharedSafety(store, disk_bytes=1 << 30)
        scope = store.scope_for("a" * 64, TARGET).id
        open_intent(store, scope, "intent_stuck", stuck)
        open_intent(store, scope, "intent_later", later)
        own_pg_cluster.stop()
        for intent in ("intent_stuck", "intent_later"):  # what CacheSession._close does
            with pytest.raises(StoreUnreachable):
                safety.write("close intent", functools.partial(resolve, store, scope, intent))
            safety.unresolved(intent)
        assert store.abandoned == {"intent_stuck", "intent_later"}
        keeper.beat()  # still down: nothing lost, tried again at the next beat
        assert keeper.failures == 1 and len(store.abandoned) == 2
        own_pg_cluster.start()
        probe_now(store, clock)
        with store.transaction():  # this one's abort went through after all
            store.delete_intent("intent_later")
        keeper.beat()
        assert store.unresolved_intents() == [] and store.abandoned == set()
        assert store.poisoned_starts(scope, [stuck, later, "e" * 64]) == {stuck}
        shared = keeper.to_json()
        assert shared["abandonedRecovered"] == 1 and shared["abandonedIntents"] == 0
        assert shared["databaseKnownDown"] is False
