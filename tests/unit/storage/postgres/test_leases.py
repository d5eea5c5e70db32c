"""Instance leases on the shared store (relay.storage.postgres.leases, relay.cache.
shared_store): timed by the database's clock, renewed while alive, and a lapsed
instance's intents poisoned by a survivor; retention one instance at a time under the
most conservative live barrier."""

from __future__ import annotations

import pytest

from relay.cache.shared_store import LeaseKeeper, SharedSafety
from relay.clock import ManualClock
from relay.errors import LeaseLapsed
from relay.storage.postgres.schema import CLEANUP_LOCK
from relay.storage.postgres.store import PostgresStore
from tests.support.pg_cluster import PgDatabase
from tests.support.pg_store import TARGET, h, idle_payload, lapse, open_pg

DAY = 86_400.0


def dispatch(store: PostgresStore, intent: str, start: int) -> int:
    scope = store.scope_for(h(1), TARGET).id
    with store.transaction():
        store.create_intent(intent, scope_id=scope, position=start, start_digest=h(start), now=1.0)
    return scope


def test_the_lease_follows_the_database_clock_not_the_relay_clock(
    pg_database: PgDatabase,
) -> None:
    """A relay whose own clock runs days ahead still holds its lease; a lease past its
    time by the database's clock is lapsed whatever the relay's clock says."""
    clock = ManualClock()
    with open_pg(pg_database, clock, lease_ms=60_000) as store:
        clock.jump_wall(30 * DAY)
        assert store.heartbeat() and [i.id for i in store.live_instances()] == [store.instance_id]
        lapse(pg_database, store.instance_id)
        assert store.live_instances() == []


def test_a_survivor_poisons_and_removes_a_lapsed_instances_intents(
    pg_database: PgDatabase,
) -> None:
    with open_pg(pg_database) as dead, open_pg(pg_database) as survivor:
        scope = dispatch(dead, "intent_dead", 3)
        dispatch(survivor, "intent_live", 5)
        assert survivor.recover_lapsed(2.0) == 0  # both alive: nothing is anyone's to poison
        lapse(pg_database, dead.instance_id)
        assert survivor.recover_lapsed(2.0) == 1
        assert survivor.poisoned_starts(scope, [h(3), h(5)]) == {h(3)}
        assert [i.id for i in survivor.unresolved_intents()] == ["intent_live"]
        assert [i.id for i in survivor.live_instances()] == [survivor.instance_id]


def test_an_instance_back_after_its_lease_lapsed_is_a_new_instance(
    pg_database: PgDatabase,
) -> None:
    """Its dispatch fails before anything is forwarded (LeaseLapsed); the safety write
    registers it again under a new id and reruns the local transaction, which the new
    lease carries. Its heartbeat finds the lapse too."""
    with open_pg(pg_database) as back, open_pg(pg_database) as survivor:
        lapse(pg_database, back.instance_id)
        survivor.recover_lapsed(2.0)
        old = back.instance_id
        with pytest.raises(LeaseLapsed):
            dispatch(back, "intent_1", 3)
        safety = SharedSafety(back, disk_bytes=1 << 40)
        safety.write("dispatch intent", lambda: dispatch(back, "intent_2", 3))
        assert back.instance_id != old and safety.retried == 1
        assert [i.id for i in back.unresolved_intents()] == ["intent_2"]
        lapse(pg_database, back.instance_id)
        assert not back.heartbeat() and back.lease_lapses == 1
        assert back.instance_id in {i.id for i in survivor.live_instances()}


def test_a_graceful_close_gives_the_lease_back_at_once(pg_database: PgDatabase) -> None:
    with open_pg(pg_database) as survivor:
        leaving = open_pg(pg_database)
        dispatch(leaving, "intent_left", 4)
        leaving.close()
        assert survivor.recover_lapsed(3.0) == 1


def test_the_keeper_renews_publishes_the_barrier_and_recovers(pg_database: PgDatabase) -> None:
    clock = ManualClock()
    with open_pg(pg_database, clock) as store, open_pg(pg_database) as dead:
        dispatch(dead, "intent_dead", 3)
        lapse(pg_database, dead.instance_id)
        cutoff: list[float | None] = [None]
        keeper = LeaseKeeper(store, clock, barrier_cutoff=lambda: cutoff[0])
        keeper.beat()
        assert (keeper.renewals, keeper.recovered) == (1, 1)
        assert [i.barrier_open for i in store.live_instances()] == [False]
        cutoff[0] = 5.0
        keeper.beat()
        assert [i.barrier_open for i in store.live_instances()] == [True]
        status = keeper.to_json()
        assert status["instance"] == store.instance_id and status["kind"] == "postgresql"
        assert "password" not in str(status)


@pytest.mark.parametrize(
    ("other_cutoff", "reclaimed"),
    [(None, 0), (5.0, 0), (50.0, 1)],
    ids=["other-barrier-shut", "other-cutoff-older", "both-open"],
)
def test_cleanup_uses_the_most_conservative_live_barrier(
    pg_database: PgDatabase, other_cutoff: float | None, reclaimed: int
) -> None:
    with open_pg(pg_database) as store, open_pg(pg_database) as other:
        idle_payload(store, 1)  # touched at 10.0
        other.barrier_cutoff = other_cutoff
        other.heartbeat()
        assert store.cleanup.reclaim(100.0).reclaimed == reclaimed


def test_cleanup_runs_on_one_instance_at_a_time(pg_database: PgDatabase) -> None:
    with open_pg(pg_database) as store, open_pg(pg_database) as other:
        idle_payload(store, 1)
        other.barrier_cutoff = 100.0
        other.heartbeat()
        with other.transaction(), other._writer("hold") as conn:  # another run in progress
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (CLEANUP_LOCK,))
            assert store.cleanup.reclaim(100.0).reclaimed == 0
        assert store.cleanup.skipped_locked == 1
        assert store.cleanup.reclaim(100.0).reclaimed == 1


def test_a_silent_instance_is_recovered_once_its_lease_runs_out(pg_database: PgDatabase) -> None:
    """No manual lapse: an instance that stops renewing (killed) is recovered by a
    survivor once its short lease has run out by the database's clock, not before."""
    with open_pg(pg_database, lease_ms=400) as killed, open_pg(pg_database) as survivor:
        scope = dispatch(killed, "intent_killed", 3)
        assert survivor.recover_lapsed(1.0) == 0  # still within its lease
        with pg_database.connect() as conn:  # wait on the database's clock, not ours
            conn.execute("SELECT pg_sleep(0.5)")
        assert survivor.recover_lapsed(2.0) == 1
        assert survivor.poisoned_starts(scope, [h(3)]) == {h(3)}
        assert not killed.heartbeat()  # it comes back as a new instance
