"""Payload reclamation on the shared store: the rules of :mod:`relay.storage.cleanup`
(pinned, competitor, descendant; descendants first; bounded runs), with two additions for
several relays:

- one instance at a time: a run first takes ``pg_try_advisory_xact_lock``; a relay that
  does not get it skips the run (another one is reclaiming);
- the most conservative live barrier: the run publishes its own cutoff in its lease row
  and deletes only below the oldest cutoff of every live instance, and nothing while any
  live instance's deletion barrier is shut (each barrier counts from its own start);
- the lock order: the candidates' scopes are locked all at once, in id order, before any
  candidate is re-checked (:meth:`Database.lock_scopes`), the order fencing, generation
  advances and lease recovery take them in. Locked one by one in candidate order (by
  position), a run could hold a scope a fence waited for while waiting for one the
  fence held: PostgreSQL then aborted one of them (``deadlock_detected``).
"""

from __future__ import annotations

from collections.abc import Callable

from relay.storage.cleanup import MAX_RECLAIMED_PER_RUN, MAX_SCANNED_PER_RUN, CleanupResult
from relay.storage.postgres import leases
from relay.storage.postgres.database import Database
from relay.storage.postgres.payloads import has_retained_descendant
from relay.storage.postgres.schema import CLEANUP_LOCK


class PgPayloadCleanup:
    """``PostgresStore.cleanup``: reclaim idle payloads, one transaction per run."""

    def __init__(
        self, db: Database, instance: Callable[[], str], wall: Callable[[], float]
    ) -> None:
        self._db = db
        self._instance = instance  # this process's lease: where its cutoff is published
        self._wall = wall
        self.skipped_locked = 0  # runs another instance was doing (diagnostics)
        self.skipped_barrier = 0  # runs a live instance's shut barrier stopped

    def eligible(self, cutoff: float) -> int:
        with self._db.read("count payloads") as conn:
            row = conn.execute(
                "SELECT count(*) FROM payloads WHERE touched_at < %s", (cutoff,)
            ).fetchone()
        return int(row[0]) if row is not None else 0

    def reclaim(
        self,
        cutoff: float,
        *,
        limit: int = MAX_RECLAIMED_PER_RUN,
        scan: int = MAX_SCANNED_PER_RUN,
        now: float | None = None,
    ) -> CleanupResult:
        reclaimed_at = self._wall() if now is None else now
        reclaimed = reclaimed_bytes = examined = pinned = competitor = descendant = 0
        capped = False
        db = self._db
        with db.transaction(), db.write("reclaim payloads") as conn:
            locked = conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (CLEANUP_LOCK,))
            row = locked.fetchone()
            if row is None or not row[0]:
                self.skipped_locked += 1
                return CleanupResult()
            shared = leases.shared_cutoff(conn, self._instance(), cutoff)
            if shared is None:
                self.skipped_barrier += 1
                return CleanupResult()
            candidates = conn.execute(
                "SELECT p.observation_id, p.size, o.scope_id, o.start_digest, o.intent_id "
                "FROM payloads p JOIN observations o ON o.id = p.observation_id "
                "WHERE p.touched_at < %s ORDER BY o.position DESC, o.id DESC LIMIT %s",
                (shared, scan),
            ).fetchall()
            # Every scope a candidate may need, locked now in id order: a dispatch
            # selecting one of these blocks waits, or went first and pinned or touched
            # it (then it is kept below).
            db.lock_scopes(conn, [row[2] for row in candidates])
            for observation_id, size, scope_id, start, producer in candidates:
                if reclaimed == limit:
                    capped = True
                    break
                examined += 1
                flags = conn.execute(
                    "SELECT EXISTS (SELECT 1 FROM dependencies WHERE ancestor_id = %s) "
                    "OR EXISTS (SELECT 1 FROM intents WHERE id = %s), "
                    "EXISTS (SELECT 1 FROM observations o JOIN payloads p "
                    "ON p.observation_id = o.id WHERE o.scope_id = %s AND o.start_digest = %s "
                    "AND o.id != %s AND p.touched_at >= %s), "
                    "EXISTS (SELECT 1 FROM payloads WHERE observation_id = %s "
                    "AND touched_at < %s)",
                    (observation_id, producer, scope_id, start, observation_id, shared,
                     observation_id, shared),
                ).fetchone()  # fmt: skip
                assert flags is not None
                if flags[0]:
                    pinned += 1
                elif flags[1]:
                    competitor += 1
                elif not flags[2]:
                    continue  # touched by a dispatch since the scan: in use again
                elif has_retained_descendant(conn, observation_id):
                    descendant += 1
                else:
                    conn.execute(
                        "DELETE FROM payloads WHERE observation_id = %s", (observation_id,)
                    )
                    conn.execute(
                        "UPDATE observations SET reclaimed_at = %s WHERE id = %s",
                        (reclaimed_at, observation_id),
                    )
                    reclaimed += 1
                    reclaimed_bytes += size
            capped = capped or len(candidates) == scan
        return CleanupResult(
            reclaimed, reclaimed_bytes, examined, pinned, competitor, descendant, capped
        )
