"""Disk pressure in the cache shell (design §6 "Disk pressure"): safety writes that may
spend the reserve, the ``.guard`` latch, and payload admission.

A *safety write* is a transaction whose failure would otherwise leave an unobserved
generation unrecorded: a dispatch intent, a bypass or abort poison, a fence, an
observation, a refusal's markers, startup recovery. :meth:`DiskSafety.write` runs it; on
``SQLITE_FULL`` or an I/O error it releases the reserve and runs the same local
transaction once more (it never resends a model request: each caller's transaction comes
before its send, or after the answer is in hand). A second failure latches: ``.guard`` is
written beside the store, and from then on every request that would need a safety record
gets 503 ``cache_unavailable`` instead of an unsafe forward.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from relay.clock import Clock
from relay.core.disk_policy import (
    Admission,
    AfterFailure,
    after_safety_failure,
    refuse_payload,
    wal_policy,
)
from relay.errors import StoreError, StoreFull, StoreIOError, StoreLatched
from relay.observability import log
from relay.storage.disk_guard import DiskGuard, refuse_if_blocked, refuse_if_latched
from relay.storage.interface import ReplayStore
from relay.storage.replay_store import ReasoningStore

T = TypeVar("T")
PAGE_SIZE = 4096  # SQLite's default, which the store keeps


def store_exists(path: Path) -> bool:
    """Whether a store is there to open (disabled startup must not create one)."""
    return ReasoningStore.exists(path)


def open_store(guard: DiskGuard, clock: Clock) -> ReasoningStore:
    """Open the store unless it is latched (``.guard``) or a backup or restore into it has
    not finished (``.blocked``). A full disk or an I/O error may refuse the startup
    checkpoint or write: the reserve is released and the open tried once more (a second
    failure stops startup; it writes no guard, since nothing was served)."""
    refuse_if_latched(guard.db)
    refuse_if_blocked(guard.db)  # checked before the open, which would create a missing file
    try:
        return ReasoningStore.open(guard.db, clock=clock, reserve_bytes=guard.reserve_bytes)
    except (StoreFull, StoreIOError) as err:
        name = "cache_reserve_released" if guard.release_reserve() else "cache_write_retried"
        log.event(name, what="startup", code=err.sqlite_error)
    return ReasoningStore.open(guard.db, clock=clock, reserve_bytes=guard.reserve_bytes)


class DiskSafety:
    """The reserve, the latch and admission of one open store."""

    def __init__(
        self, store: ReplayStore, guard: DiskGuard, *, disk_bytes: int, clock: Clock
    ) -> None:
        self._store = store
        self.guard = guard
        self._disk_bytes = disk_bytes
        self._clock = clock
        self._wal = wal_policy(guard.reserve_bytes, PAGE_SIZE)
        self.reserve_releases = 0  # diagnostics
        self.refused_payloads = 0

    @property
    def latched(self) -> bool:
        return self.guard.latched

    def check(self) -> None:
        """Raise :class:`StoreLatched` (503) once the cache has stopped."""
        if self.guard.latched:
            raise StoreLatched(
                f"the reasoning cache is stopped: a safety record could not be written "
                f"twice; the relay's operator must free disk space and follow {self.guard.guard}"
            )

    def write(
        self, what: str, body: Callable[[], T], *, request_id: str | None = None,
        latch: bool = True,
    ) -> T:  # fmt: skip
        """Run the transaction ``body``; on a full disk or an I/O error release the reserve
        and run it once more; a second failure latches (``latch=False`` at startup, where
        failing to start already refuses everything) and raises :class:`StoreLatched`."""
        self.check()
        failures = 0
        while True:
            try:
                return body()
            except (StoreFull, StoreIOError) as err:
                failures += 1
                step = after_safety_failure(failures, self.guard.reserve_held)
                if step is AfterFailure.LATCH:
                    if not latch:
                        raise
                    self._latch(what, err, request_id)
                if step is AfterFailure.RELEASE_AND_RETRY and self.guard.release_reserve():
                    self.reserve_releases += 1
                    log.event("cache_reserve_released", request_id=request_id, what=what,
                              code=err.sqlite_error)  # fmt: skip
                else:
                    log.event("cache_write_retried", request_id=request_id, what=what,
                              code=err.sqlite_error)  # fmt: skip

    def _latch(self, what: str, err: StoreError, request_id: str | None) -> None:
        written = self.guard.latch(what, err.sqlite_error, self._clock.wall())
        log.event("cache_latched", request_id=request_id, what=what, code=err.sqlite_error,
                  guard=str(self.guard.guard) if written else None)  # fmt: skip
        self.check()

    def unresolved(self, intent_id: str) -> None:
        """Nothing to remember: the file's open intents are poisoned by startup recovery
        (a write the file refused has latched it, so none follows before a restart)."""
        del intent_id

    def refuse_payload(self, payload_bytes: int) -> Admission | None:
        """Whether a payload of this size may be stored now (``None``: yes). A released
        reserve is allocated again first when the volume has room for it."""
        if not self.guard.reserve_held and self.guard.ensure_reserve():
            log.event("cache_reserve_restored", bytes=self.guard.reserve_bytes)
        try:
            used = self._store.used_bytes()
        except StoreError:
            return Admission.LOW_FREE_SPACE  # cannot measure: do not grow the store
        refused = refuse_payload(
            self.guard.state(used), payload_bytes, disk_bytes=self._disk_bytes, wal=self._wal
        )
        if refused is not None:
            self.refused_payloads += 1
        return refused

    def pressure(self) -> Admission | None:
        """Whether a small payload would be refused now (for ``/readyz``): like
        :meth:`refuse_payload` but moving no counter and allocating no reserve."""
        try:
            used = self._store.used_bytes()
        except StoreError:
            return Admission.LOW_FREE_SPACE
        return refuse_payload(self.guard.state(used), 1, disk_bytes=self._disk_bytes, wal=self._wal)

    def checkpoint(self) -> None:
        """Best effort (after cleanup, at shutdown): a failed checkpoint loses nothing."""
        try:
            self._store.checkpoint()
        except StoreError as err:
            log.event("cache_checkpoint_failed", code=err.sqlite_error)
