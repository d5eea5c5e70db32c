"""The replay cache's SQLite store (design §6): :class:`ReasoningStore`, the
:class:`~relay.storage.interface.ReplayStore` the cache is typed against, over one
exclusively owned SQLite database.

It composes the pieces, each in its own module: the database (:mod:`relay.storage.
database`: opening, ownership lock, PRAGMAs, transactions, error translation), one gateway
per table (:mod:`~relay.storage.scopes`, :mod:`~relay.storage.observations`,
:mod:`~relay.storage.payloads`, :mod:`~relay.storage.markers`,
:mod:`~relay.storage.intents` with their pins, :mod:`~relay.storage.meta`), the
strict-provider records (``ReasoningStore.strict``, :mod:`relay.storage.strict_store`),
payload reclamation (``ReasoningStore.cleanup``, :mod:`relay.storage.cleanup`) and the
read-only views (:mod:`relay.storage.diagnostics`). All share the one connection, its
transactions and its error translation: every ``sqlite3`` error leaving here is a
:class:`~relay.errors.StoreError` that names no stored value.

Writes happen only inside :meth:`ReasoningStore.transaction`; a write method called
outside one raises ``RuntimeError``. Reads work inside or outside.
"""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from pathlib import Path

from relay.clock import Clock
from relay.core.disk_policy import DEFAULT_RESERVE_BYTES
from relay.storage.cleanup import PayloadCleanup
from relay.storage.database import Database
from relay.storage.diagnostics import Diagnostics
from relay.storage.intents import Intents
from relay.storage.markers import Markers
from relay.storage.meta import Meta
from relay.storage.observations import Observations
from relay.storage.payloads import Payloads
from relay.storage.scopes import Scopes
from relay.storage.strict_store import StrictEntries


class ReasoningStore(Scopes, Observations, Payloads, Markers, Intents, Meta, Diagnostics):
    """The replay cache's persistent state, owned exclusively by this process: the table
    gateways over one :class:`~relay.storage.database.Database` (each gateway reaches it
    as ``self._db``; they share it, and its transactions, by construction)."""

    def __init__(self, db: Database, clock: Clock) -> None:
        """Use :meth:`open`."""
        Scopes.__init__(self, db, clock.wall)
        Observations.__init__(self, db)
        Payloads.__init__(self, db)
        Markers.__init__(self, db)
        Intents.__init__(self, db)
        Meta.__init__(self, db)
        Diagnostics.__init__(self, db)
        # The strict-provider records (relay.strict), on this same connection.
        self.strict = StrictEntries(db.read, db.write, db.transaction)
        # Payload reclamation (relay.storage.cleanup), on this same connection.
        self.cleanup = PayloadCleanup(db.read, db.write, db.transaction, clock.wall)

    @staticmethod
    def exists(path: Path) -> bool:
        """Whether a store file is there (disabled startup must not create one)."""
        return path.exists()

    @classmethod
    def open(
        cls, path: Path, *, clock: Clock, reserve_bytes: int = DEFAULT_RESERVE_BYTES
    ) -> ReasoningStore:
        """Open (creating if needed) and take exclusive ownership of the store at ``path``
        (:meth:`relay.storage.database.Database.open`: :class:`~relay.errors.StoreLocked`
        when another process holds it, :class:`~relay.errors.StoreCorrupt` for a file that
        is not a usable reasoning cache, other ``StoreError``\\ s for I/O trouble)."""
        return cls(Database.open(path, clock=clock, reserve_bytes=reserve_bytes), clock)

    def transaction(self, *, before_send: bool = False) -> AbstractContextManager[None]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``; ``ROLLBACK`` when the body raises.
        ``before_send``: see :meth:`relay.storage.database.Database.transaction`."""
        return self._db.transaction(before_send=before_send)

    def checkpoint(self) -> None:
        self._db.checkpoint()

    def used_bytes(self) -> int:
        return self._db.used_bytes()

    def close(self) -> None:
        """Release the lock and the file; calling it again does nothing."""
        self._db.close()

    def __enter__(self) -> ReasoningStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def path(self) -> Path:
        return self._db.path

    @property
    def secret(self) -> bytes:
        """The persistent cache-local secret that keys scope fingerprints."""
        return self._db.secret

    @property
    def _conn(self) -> sqlite3.Connection | None:
        # For tests and live checks that tamper with rows or set PRAGMAs on the owner's
        # connection; product code goes through the gateways.
        return self._db.connection

    def _writer(self, action: str) -> AbstractContextManager[sqlite3.Connection]:
        # The same, for a live check's deliberate damage inside a transaction.
        return self._db.write(action)
