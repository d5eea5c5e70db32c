"""The shared PostgreSQL store in the cache shell (design, "Team deployment: guarantee by
guarantee"): opening it with lease recovery, safety writes with a bounded retry of the
local transaction, admission against the database's size, and the lease heartbeat.

:class:`SharedSafety` stands where :class:`~relay.cache.disk_safety.DiskSafety` stands for
the SQLite file (``ReplayCache.safety``). There is no reserve file and no latch: a
database that cannot be reached fails each safety write with 503 ``cache_unavailable``
(:class:`~relay.errors.StoreUnreachable`), at once while it is known down, and a
background probe (:mod:`relay.storage.postgres.connections`) finds it back, so the relay
recovers without an operator. An intent a session could not resolve meanwhile is
remembered (:meth:`SharedSafety.unresolved`) and poisoned by the next heartbeat that
reaches the database. A lost race (deadlock, serialization
failure) reruns the same local transaction, at most :data:`MAX_ATTEMPTS` times: each
caller's transaction comes before its send or after its answer, so no model request is
sent again. A lapsed lease (:class:`~relay.errors.LeaseLapsed`) makes this process
register as a new instance before its transaction runs again.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeGuard, TypeVar

from relay.cache.periodic import Periodic
from relay.clock import Clock
from relay.core.disk_policy import Admission
from relay.core.records import idle_window_s
from relay.errors import LeaseLapsed, StoreContention, StoreError
from relay.observability import log
from relay.settings.database_url import DatabaseUrl

if TYPE_CHECKING:
    from relay.cache.replay_cache import ReplayCache
    from relay.cache.retention import WatchedClock
    from relay.storage.postgres.store import PostgresStore

T = TypeVar("T")
MAX_ATTEMPTS: Final = 3


def is_shared(store: object) -> TypeGuard[PostgresStore]:
    """Whether ``store`` is the PostgreSQL store, without importing it (and psycopg): a
    store can only be one once :func:`open_shared` imported its module."""
    module = sys.modules.get("relay.storage.postgres.store")
    return module is not None and isinstance(store, module.PostgresStore)


def open_shared(
    url: DatabaseUrl, clock: Clock, *, lease_ms: int, disk_bytes: int
) -> tuple[PostgresStore, SharedSafety, int]:
    """Open the shared store, take a lease and recover the intents of every lapsed
    instance (the startup recovery of a shared store: a live instance's intents are its
    own business). Returns the store, its safety and how many intents were recovered.
    Raises ``StoreError`` (the relay refuses to start, in one line)."""
    # Imported here: psycopg is a quarter of the relay's start-up imports, and only a
    # relay with REASONING_CACHE_URL set needs it.
    from relay.storage.postgres.store import PostgresStore  # noqa: PLC0415

    store = PostgresStore.open(url, clock=clock, lease_ms=lease_ms)
    safety = SharedSafety(store, disk_bytes=disk_bytes)
    try:
        recovered = safety.write("startup recovery", lambda: store.recover_lapsed(clock.wall()))
    except BaseException:
        store.close()
        raise
    return store, safety, recovered


class SharedSafety:
    """Safety writes and admission on the shared store (``ReplayCache.safety``)."""

    latched: Final = False  # no latch: an unreachable database recovers on its own

    def __init__(self, store: PostgresStore, *, disk_bytes: int) -> None:
        self._store = store
        self._disk_bytes = disk_bytes
        self.retried = 0  # diagnostics
        self.refused_payloads = 0

    def check(self) -> None:
        """Nothing to check: every safety write finds out for itself."""

    def write(
        self, what: str, body: Callable[[], T], *, request_id: str | None = None,
        latch: bool = True,
    ) -> T:  # fmt: skip
        """Run the transaction ``body``; rerun it after a lost race or a lapsed lease, at
        most :data:`MAX_ATTEMPTS` times in all (``latch`` is accepted for the SQLite
        safety's signature; there is no latch here)."""
        del latch
        attempt = 1
        while True:
            try:
                return body()
            except (StoreContention, LeaseLapsed) as err:
                if attempt == MAX_ATTEMPTS:
                    raise
                attempt += 1
                self.retried += 1
                if isinstance(err, LeaseLapsed):
                    self._store.register()
                    log.event("cache_lease_renewed_as_new", request_id=request_id, what=what)
                log.event("cache_write_retried", request_id=request_id, what=what,
                          code=err.code, attempt=attempt)  # fmt: skip

    def unresolved(self, intent_id: str) -> None:
        """A session could not resolve its intent (the database is down): the lease
        heartbeat poisons and removes it once the database answers again."""
        self._store.abandon(intent_id)

    def refuse_payload(self, payload_bytes: int) -> Admission | None:
        """Disk pressure: admission stops (never deletes) when the database, with this
        payload, would exceed REASONING_CACHE_DISK_BYTES."""
        refused = self._refusal(payload_bytes)
        if refused is not None:
            self.refused_payloads += 1
        return refused

    def pressure(self) -> Admission | None:
        return self._refusal(1)

    def _refusal(self, payload_bytes: int) -> Admission | None:
        try:
            used = self._store.used_bytes()
        except StoreError:
            return Admission.LOW_FREE_SPACE  # cannot measure: do not grow the store
        return Admission.DISK_LIMIT if used + payload_bytes > self._disk_bytes else None

    def checkpoint(self) -> None:
        """Nothing to do: PostgreSQL checkpoints itself."""


@dataclass
class LeaseKeeper(Periodic):
    """Renew this instance's lease every third of its length and recover lapsed
    instances' intents, on the IOLoop (asyncio's monotonic ``call_later``: a wall clock
    step cannot stall it). ``barrier_cutoff`` reads this instance's retention cutoff
    (``None``: its deletion barrier is shut), published with each renewal."""

    store: PostgresStore
    clock: Clock
    barrier_cutoff: Callable[[], float | None]
    renewals: int = 0
    recovered: int = 0
    failures: int = 0

    @classmethod
    def for_cache(
        cls, cache: ReplayCache, clock: WatchedClock, *, retention_s: float
    ) -> LeaseKeeper | None:
        """The keeper of ``cache``'s shared store (``None``: the SQLite file has no lease).
        It publishes ``clock``'s retention cutoff; a relay serving with caching off never
        deletes, so its barrier stays shut and cleanup elsewhere waits for it."""
        store = cache.store
        if not is_shared(store):
            return None
        window = idle_window_s(retention_s)

        def cutoff() -> float | None:
            return clock.barrier.idle_cutoff(window) if cache.enabled else None

        return cls(store, clock, barrier_cutoff=cutoff)

    def interval_s(self) -> float:
        return self.store.lease_ms / 3000.0

    def tick(self) -> None:
        self.beat()

    def beat(self) -> None:
        """One renewal and one recovery pass now (failures are logged, never raised): the
        lapsed instances' intents, then this instance's own whose resolution failed while
        the database was down (``PostgresStore.abandoned``)."""
        try:
            self.store.barrier_cutoff = self.barrier_cutoff()
            if not self.store.heartbeat():
                log.event("cache_lease_lapsed", logging.WARNING, instance=self.store.instance_id)
            self.renewals += 1
            recovered = self.store.recover_lapsed(self.clock.wall())
            own = self.store.recover_abandoned(self.clock.wall())
        except StoreError as err:
            self.failures += 1
            log.event("cache_lease_failed", logging.WARNING, code=err.code)
            return
        if recovered:
            self.recovered += recovered
            log.event("cache_lapsed_intents_recovered", logging.WARNING, intents=recovered)
        if own:
            log.event("cache_abandoned_intents_recovered", logging.WARNING, intents=own)

    def to_json(self) -> dict[str, object]:
        """For ``relay status`` and the cache API: this instance, the live ones and their
        leases (ids, hosts, pids, times: no secret)."""
        try:
            live = [lease.to_json() for lease in self.store.live_instances()]
        except StoreError:
            live = None
        connections = self.store.connections
        return {
            "kind": "postgresql",
            "database": str(self.store.url),
            "instance": self.store.instance_id,
            "leaseSeconds": self.store.lease_ms / 1000,
            "renewals": self.renewals,
            "leaseLapses": self.store.lease_lapses,
            "recoveredIntents": self.recovered,
            "abandonedIntents": len(self.store.abandoned),
            "abandonedRecovered": self.store.abandoned_recovered,
            "databaseKnownDown": connections is not None and connections.known_down,
            "failures": self.failures,
            "liveInstances": live,
        }
