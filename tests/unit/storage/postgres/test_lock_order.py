"""The shared store's lock order (relay.storage.postgres.database.Database.lock_scopes):
every transaction that locks several conversations takes them in id order, and scopes
before lease rows, so cleanup and a fence, or lease recovery and an intent insert,
running at once wait for each other instead of deadlocking (SQLSTATE 40P01)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from relay.clock import ManualClock
from relay.errors import StoreError
from relay.storage.cleanup import CleanupResult
from relay.storage.recovery import fence
from scenarios.wait import wait_until
from tests.support.pg_cluster import PgDatabase
from tests.support.pg_store import TARGET, h, idle_payload, lapse, open_pg

LOCK_WAITERS = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND wait_event_type = 'Lock'"
)


@dataclass
class Outcome:
    errors: list[BaseException] = field(default_factory=list)
    results: list[object] = field(default_factory=list)


def in_thread(job: Callable[[], object], outcome: Outcome) -> threading.Thread:
    def run() -> None:
        try:
            outcome.results.append(job())
        except BaseException as exc:  # the test reports it
            outcome.errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def waiting(database: PgDatabase, count: int) -> bool:
    with database.connect() as conn:
        row = conn.execute(LOCK_WAITERS).fetchone()
    return row is not None and row[0] >= count


def test_cleanup_and_a_fence_at_once_wait_instead_of_deadlocking(
    pg_database: PgDatabase,
) -> None:
    """The interleaving that deadlocked: cleanup visits candidates by position, highest
    first, so it reached the newer scope (B, higher position) before the older one (A);
    a fence locks A then B. Cleanup is held on B's payload row (the test's lock) while
    the fence starts; once released, cleanup needs A. Locked in candidate order, cleanup
    held B while the fence held A and waited for B: PostgreSQL aborted one of them with
    deadlock_detected. Locked in id order, the fence waits for cleanup's commit."""
    clock = ManualClock()
    with open_pg(pg_database, clock) as cleaner, open_pg(pg_database, clock) as fencer:
        older = idle_payload(cleaner, 1, scope_digest=h(1))  # scope A: position 3
        newer = idle_payload(cleaner, 5, scope_digest=h(2))  # scope B: position 11
        scope_a, scope_b = (cleaner.scope_for(h(n), TARGET).id for n in (1, 2))
        assert scope_a < scope_b  # A first in id order, B first in candidate order
        for store in (cleaner, fencer):  # both barriers open, cutoffs above 10.0
            store.barrier_cutoff = 100.0
            store.heartbeat()
        cleaned, fenced = Outcome(), Outcome()
        with pg_database.connect() as holder, holder.transaction():
            holder.execute("SELECT 1 FROM payloads WHERE observation_id = %s FOR UPDATE", (newer,))
            cleanup = in_thread(lambda: cleaner.cleanup.reclaim(100.0), cleaned)
            wait_until(lambda: waiting(pg_database, 1), timeout=10, what="cleanup to wait")
            fencing = in_thread(lambda: fence(fencer, TARGET, 20.0), fenced)
            wait_until(lambda: waiting(pg_database, 2), timeout=10, what="the fence to wait")
        cleanup.join(30)
        fencing.join(30)
        assert not cleanup.is_alive() and not fencing.is_alive()
        # Either side's deadlock_detected would be here, as StoreContention (40P01).
        assert cleaned.errors == [] and fenced.errors == [], (cleaned.errors, fenced.errors)
        result = cleaned.results[0]
        assert isinstance(result, CleanupResult) and result.reclaimed == 2
        assert fenced.results == [2]
        assert cleaner.load_payloads([older, newer], max_bytes=100) == {}
        assert all(
            (found := fencer.find_scope(h(n))) is not None and found.generation == 2 for n in (1, 2)
        )


def test_lease_recovery_and_an_intent_insert_at_once_wait_instead_of_deadlocking(
    pg_database: PgDatabase,
) -> None:
    """The request path locks its scope, then its own lease row (the share lock of its
    intent insert). An insert that passed its lease check an instant before the lease
    lapsed (too short a window to stop a statement in, so the test takes that share
    lock itself) meets a survivor's recovery of the same instance. Recovery used to lock
    the lapsed row first and then wait for the scope the insert held, while the insert
    waited for the row: PostgreSQL aborted one of them with deadlock_detected. Locking
    scopes first, recovery waits for the request's commit, then recovers."""
    with open_pg(pg_database) as paused, open_pg(pg_database) as survivor:
        scope = paused.scope_for(h(1), TARGET).id
        with paused.transaction():
            paused.create_intent("intent_1", scope_id=scope, position=3, start_digest=h(3), now=1.0)
        lapse(pg_database, paused.instance_id)
        recovered, requested = Outcome(), Outcome()
        try:
            with paused.transaction():
                paused.latest_snapshot(scope)  # the request path's lock of its scope
                recovery = in_thread(lambda: survivor.recover_lapsed(2.0), recovered)
                wait_until(lambda: waiting(pg_database, 1), timeout=10, what="recovery to wait")
                with paused._writer("record an intent") as conn:
                    conn.execute(
                        "SELECT 1 FROM instances WHERE id = %s FOR KEY SHARE",
                        (paused.instance_id,),
                    )
        except StoreError as exc:  # deadlock_detected here is StoreContention (40P01)
            requested.errors.append(exc)
        recovery.join(30)
        assert not recovery.is_alive()
        assert requested.errors == [] and recovered.errors == [], (
            requested.errors,
            recovered.errors,
        )
        assert recovered.results == [1]
        assert survivor.poisoned_starts(scope, [h(3)]) == {h(3)}
        assert survivor.unresolved_intents() == []
        assert [i.id for i in survivor.live_instances()] == [survivor.instance_id]


def test_locking_below_a_held_scope_is_refused(pg_database: PgDatabase) -> None:
    """The order is checked, not only followed: a transaction holding a scope that asks
    for a lower one would wait in the other order, so it is a programming error."""
    with open_pg(pg_database) as store:
        low, high = (store.scope_for(h(n), TARGET).id for n in (1, 2))
        with store.transaction():
            store.advance_generations([high, low])  # both at once: in id order, fine
            store.advance_generations([high])  # held already: nothing new to order
        with (
            pytest.raises(RuntimeError, match="id order"),
            store.transaction(),
        ):
            store.latest_snapshot(high)  # the request path's lock of one scope
            store.advance_generations([low])
