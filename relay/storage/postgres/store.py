"""The replay cache's shared PostgreSQL store: the SQLite store's semantics for several
relays at once (design §6 and §22 "Team deployment: guarantee by guarantee").

One :class:`PostgresStore` per relay process. It composes the pieces the way
:class:`relay.storage.replay_store.ReasoningStore` does, each in its own module: the
database (:mod:`relay.storage.postgres.database`: opening, migration, transactions, the
conversation lock and its order, error translation), one gateway per table
(:mod:`~relay.storage.postgres.scopes`, :mod:`~relay.storage.postgres.observations`,
:mod:`~relay.storage.postgres.payloads`, :mod:`~relay.storage.postgres.markers`,
:mod:`~relay.storage.postgres.intents` with their pins, :mod:`~relay.storage.postgres.
meta`), this process's lease (:mod:`relay.storage.postgres.leases`), the strict-provider
records (``PostgresStore.strict``, :mod:`relay.storage.postgres.strict`), payload
reclamation (``PostgresStore.cleanup``, :mod:`relay.storage.postgres.cleanup`) and the
read-only views (:mod:`relay.storage.postgres.diagnostics`). All share the one
:class:`~relay.storage.postgres.database.Database`: its connections, its transaction,
the scopes that transaction holds and its error translation.

Writes happen only inside :meth:`PostgresStore.transaction`; a write method called
outside one raises ``RuntimeError``. Reads work inside or outside.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Final

from relay.clock import Clock
from relay.settings.database_url import DatabaseUrl
from relay.storage.postgres.cleanup import PgPayloadCleanup
from relay.storage.postgres.connections import Conn, Connections
from relay.storage.postgres.database import Database, store_error
from relay.storage.postgres.diagnostics import Diagnostics
from relay.storage.postgres.intents import Intents
from relay.storage.postgres.leases import Leases
from relay.storage.postgres.markers import Markers
from relay.storage.postgres.meta import Meta
from relay.storage.postgres.observations import Observations
from relay.storage.postgres.payloads import Payloads
from relay.storage.postgres.scopes import Scopes
from relay.storage.postgres.strict import PgStrictEntries

__all__ = ["PostgresStore", "store_error"]


class PostgresStore(
    Scopes, Observations, Payloads, Markers, Intents, Meta, Diagnostics, Leases
):  # fmt: skip
    """The replay cache's persistent state, shared by every relay on one database: the
    table gateways over one :class:`~relay.storage.postgres.database.Database` (each
    reaches it as ``self._db``)."""

    kind: Final = "postgresql"

    def __init__(self, db: Database, clock: Clock, *, lease_ms: int) -> None:
        """Use :meth:`open`."""
        Scopes.__init__(self, db, clock.wall)
        Observations.__init__(self, db)
        Payloads.__init__(self, db)
        Markers.__init__(self, db)
        Intents.__init__(self, db, self._instance_id)
        Meta.__init__(self, db, self.advance_generations)
        Diagnostics.__init__(self, db)
        Leases.__init__(self, db, lease_ms=lease_ms)
        self.strict = PgStrictEntries(db.read, db.write, db.transaction)
        self.cleanup = PgPayloadCleanup(db, self._instance_id, clock.wall)

    @classmethod
    def open(cls, url: DatabaseUrl, *, clock: Clock, lease_ms: int) -> PostgresStore:
        """Connect, migrate (refusing a newer schema), create the secret once, and register
        this process's lease. Raises :class:`~relay.errors.StoreUnreachable` when the
        database cannot be reached, :class:`~relay.errors.StoreCorrupt` for one that is not
        a usable reasoning cache."""
        db = Database.open(url, clock=clock)
        try:
            store = cls(db, clock, lease_ms=lease_ms)
            store.register()
        except BaseException:
            db.close()
            raise
        return store

    def _instance_id(self) -> str:
        return self.instance_id

    @contextmanager
    def transaction(self, *, before_send: bool = False) -> Iterator[None]:
        """``BEGIN`` … ``COMMIT`` (durable: ``synchronous_commit = on``); ``ROLLBACK`` when
        the body raises. ``before_send`` changes nothing here: PostgreSQL's checkpoints
        are the server's, never in a client's commit."""
        del before_send
        with self._db.transaction():
            yield

    @property
    def url(self) -> DatabaseUrl:
        return self._db.url

    @property
    def connections(self) -> Connections | None:
        """The connections (``None`` once closed): their probe state, for diagnostics."""
        return self._db.connections

    @property
    def secret(self) -> bytes:
        return self._db.secret

    def checkpoint(self) -> None:
        """Nothing to do: PostgreSQL checkpoints itself."""

    def used_bytes(self) -> int:
        """The database's size (``pg_database_size``), for REASONING_CACHE_DISK_BYTES."""
        return self._db.used_bytes()

    def close(self) -> None:
        """Give the lease back (its intents stay for a survivor to poison) and close."""
        self._db.close(self.release)

    def _writer(self, action: str) -> AbstractContextManager[Conn]:
        # For tests and live checks that tamper with rows inside a transaction (as
        # ReasoningStore._writer); product code goes through the gateways.
        return self._db.write(action)

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
