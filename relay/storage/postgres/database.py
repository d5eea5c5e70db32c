"""The shared store's database: opening (migration, the secret, a restored dump's
quarantine), transactions, the conversation lock and error translation (design §22). The
table gateways (:mod:`~relay.storage.postgres.scopes`, ``observations``, ``payloads``,
``markers``, ``intents``, ``meta``, ``diagnostics``, ``strict``, ``cleanup`` and the
lease methods of :mod:`~relay.storage.postgres.leases`) reach a connection only through
:meth:`Database.read`, :meth:`Database.write`, :meth:`Database.scoped` and
:meth:`Database.transaction`, as the SQLite gateways reach theirs
(:mod:`relay.storage.database`).

Writes happen only inside :meth:`Database.transaction` (one connection, ``BEGIN`` …
``COMMIT`` with ``synchronous_commit = on``), so a decision's rows commit durably, all or
nothing, before the caller acts on them. Reads work inside or outside one.

Concurrency: SQLite serializes every write transaction; here a transaction locks the
conversation it touches. The first statement that names a scope inside a transaction
takes that scope's row lock (``SELECT … FOR UPDATE``, :meth:`Database.lock_scope`) before
reading anything of it, so two relays dispatching, observing or resolving in one scope
run one after the other, each seeing the other's committed intent, markers and records.
A transaction that locks several scopes (fencing, generation advances, cleanup, lease
recovery) takes them all at once, in id order, before any other
(:meth:`Database.lock_scopes`): every transaction then waits in one global order and two
of them cannot deadlock on scopes. A deadlock or serialization failure still leaves as
:class:`~relay.errors.StoreContention`, which the cache shell
(:class:`relay.cache.shared_store.SharedSafety`) retries as a whole local transaction, at
most three times (never the model request).

Every psycopg error leaving here is a :class:`~relay.errors.StoreError` whose message
names the database by its password-free description and PostgreSQL's SQLSTATE, never a
value.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Final

import psycopg
from psycopg import errors as pg_errors

from relay.clock import Clock
from relay.core.records import MarkerKind
from relay.errors import LeaseLapsed, StoreContention, StoreCorrupt, StoreError, StoreUnreachable
from relay.settings.database_url import DatabaseUrl
from relay.storage.postgres.connections import Conn, Connections, StoreDown
from relay.storage.postgres.schema import migrate
from relay.storage.schema import SchemaRefused

SECRET_BYTES: Final = 32
IDENTITY_KEY: Final = "database-identity"  # cluster id and database oid that wrote it
CONNECT_TIMEOUT_S: Final = 2


def store_error(exc: BaseException, where: str, action: str) -> StoreError:
    """Translate a psycopg error using its class and SQLSTATE only: its text
    may quote stored values."""
    if isinstance(exc, StoreDown):
        return StoreUnreachable(
            f"reasoning cache {where}: {action} refused: the database was unreachable at "
            "the last attempt; the relay probes it in the background and serves again "
            "when it answers"
        )
    if isinstance(exc, psycopg.OperationalError) and not isinstance(
        exc, pg_errors.DeadlockDetected | pg_errors.QueryCanceled
    ):
        return StoreUnreachable(
            f"reasoning cache {where}: {action} failed: the database cannot be reached; "
            "the relay reconnects on its own when it is back"
        )
    sqlstate = getattr(exc, "sqlstate", None) or type(exc).__name__
    if isinstance(exc, pg_errors.SerializationFailure | pg_errors.DeadlockDetected):
        return StoreContention(
            f"reasoning cache {where}: {action} lost a race with another relay ({sqlstate})"
        )
    if isinstance(exc, pg_errors.ForeignKeyViolation) and action == "record an intent":
        return LeaseLapsed(
            f"reasoning cache {where}: this relay's lease lapsed before {action}; "
            "it registers again as a new instance"
        )
    return StoreError(f"reasoning cache {where}: {action} failed (SQLSTATE {sqlstate})")


class Database:
    """This relay's connections to the shared database, its transaction and the scopes
    that transaction holds."""

    def __init__(self, pool: Connections, url: DatabaseUrl, secret: bytes) -> None:
        """Use :meth:`open`."""
        self._pool: Connections | None = pool
        self.url = url
        self.secret = secret
        self._tx: Conn | None = None
        self._locked: set[int] = set()

    @classmethod
    def open(cls, url: DatabaseUrl, *, clock: Clock) -> Database:
        """Connect, migrate (refusing a newer schema) and create the secret once. Raises
        :class:`StoreUnreachable` when the database cannot be reached,
        :class:`StoreCorrupt` for one that is not a usable reasoning cache."""
        pool = Connections(
            url.conninfo, connect_timeout=CONNECT_TIMEOUT_S, monotonic=clock.monotonic
        )
        try:
            pool.warm()  # reachable, and the credentials work (not serving yet: no budget)
        except psycopg.Error:
            raise StoreUnreachable(
                f"cannot reach the reasoning cache database {url}: check REASONING_CACHE_URL, "
                "the server and its authentication (PGPASSFILE/PGPASSWORD)"
            ) from None
        try:
            return cls(pool, url, _prepare(pool, url))
        except BaseException:
            pool.close()
            raise

    @property
    def connections(self) -> Connections | None:
        """The connections (``None`` once closed): their probe state, for diagnostics."""
        return self._pool

    @property
    def in_transaction(self) -> bool:
        return self._tx is not None

    def close(self, last: Callable[[Conn], None] | None = None) -> None:
        """Run ``last`` on one connection, best effort (the lease's release), and close;
        calling it again does nothing."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if last is not None:
            try:
                with pool.connection() as conn:
                    last(conn)
            except psycopg.Error:
                pass  # what it gives back lapses on its own
        pool.close()

    @contextmanager
    def read(self, action: str) -> Iterator[Conn]:
        """The transaction's connection, or a pooled one in autocommit."""
        if self._tx is not None:
            try:
                yield self._tx
            except psycopg.Error as exc:
                raise store_error(exc, str(self.url), action) from None
            return
        if self._pool is None:
            raise StoreError(f"reasoning cache {self.url} is closed")
        try:
            with self._pool.connection() as conn:
                yield conn
        except psycopg.Error as exc:
            raise store_error(exc, str(self.url), action) from None

    @contextmanager
    def write(self, action: str) -> Iterator[Conn]:
        if self._tx is None:
            raise RuntimeError(f"{action} must run inside PostgresStore.transaction()")
        with self.read(action) as conn:
            yield conn

    @contextmanager
    def scoped(self, scope_id: int, action: str) -> Iterator[Conn]:
        """:meth:`read`, the scope locked first inside a transaction."""
        with self.read(action) as conn:
            self.lock_scope(conn, scope_id)
            yield conn

    @contextmanager
    def snapshot(self, action: str) -> Iterator[Conn]:
        """A read-only transaction of its own (an admin poll writes nothing)."""
        if self._pool is None:
            raise StoreError(f"reasoning cache {self.url} is closed")
        try:
            with self._pool.connection() as conn, conn.transaction():
                conn.execute("SET TRANSACTION READ ONLY")
                yield conn
        except psycopg.Error as exc:
            raise store_error(exc, str(self.url), action) from None

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """``BEGIN`` … ``COMMIT`` (durable: ``synchronous_commit = on``); ``ROLLBACK`` when
        the body raises."""
        if self._tx is not None:
            raise RuntimeError("PostgresStore transactions do not nest")
        if self._pool is None:
            raise StoreError(f"reasoning cache {self.url} is closed")
        try:
            with self._pool.connection() as conn, conn.transaction():
                conn.execute("SET LOCAL synchronous_commit = on")
                self._tx = conn
                try:
                    yield
                finally:
                    self._tx = None
                    self._locked.clear()
        except psycopg.Error as exc:
            raise store_error(exc, str(self.url), "a transaction") from None

    def lock_scope(self, conn: Conn, scope_id: int) -> None:
        """Inside a transaction, the first touch of a scope locks its row: whoever reads
        the scope's state to decide then writes it holds the conversation alone."""
        if self._tx is not None and scope_id not in self._locked:
            conn.execute("SELECT 1 FROM scopes WHERE id = %s FOR UPDATE", (scope_id,))
            self._locked.add(scope_id)

    def lock_scopes(self, conn: Conn, scope_ids: Iterable[int] | None) -> list[int]:
        """Inside a transaction, lock these scopes (``None``: every one) in id order;
        their ids, ascending. One global order is what keeps two transactions that lock
        several conversations from deadlocking, so a transaction that already holds a
        scope may take more only above it (``RuntimeError`` otherwise: a code path that
        would deadlock)."""
        if self._tx is None:
            raise RuntimeError("locking scopes must run inside PostgresStore.transaction()")
        if scope_ids is None:
            wanted = None
            rows = conn.execute("SELECT id FROM scopes ORDER BY id FOR UPDATE")
        else:
            wanted = sorted(set(scope_ids))
            if not wanted:
                return []
            rows = conn.execute(
                "SELECT id FROM scopes WHERE id = ANY(%s) ORDER BY id FOR UPDATE", (wanted,)
            )
        ids = [row[0] for row in rows]
        fresh = [i for i in ids if i not in self._locked]
        if fresh and self._locked and fresh[0] < max(self._locked):
            raise RuntimeError(
                "scopes must be locked in id order: this transaction holds scope "
                f"{max(self._locked)} and asked for {fresh[0]}"
            )
        self._locked.update(ids)
        return ids if wanted is None else wanted

    def note_locked(self, scope_ids: Iterable[int]) -> None:
        """A statement of the caller's own locked these scopes (``… FOR UPDATE``)."""
        if self._tx is not None:
            self._locked.update(scope_ids)

    def used_bytes(self) -> int:
        """The database's size (``pg_database_size``), for REASONING_CACHE_DISK_BYTES."""
        with self.read("measure the database") as conn:
            row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        return int(row[0]) if row is not None else 0


def _prepare(pool: Connections, url: DatabaseUrl) -> bytes:
    """The startup transaction: migrate, quarantine a restored dump, create the secret
    once; the secret."""
    try:
        with pool.connection() as conn, conn.transaction():
            migrate(conn)
            _quarantine_if_restored(conn)
            conn.execute(
                "INSERT INTO store_secret (secret) VALUES (%s) ON CONFLICT DO NOTHING",
                (secrets.token_bytes(SECRET_BYTES),),
            )
            row = conn.execute("SELECT secret FROM store_secret").fetchone()
    except SchemaRefused as exc:
        raise StoreCorrupt(
            f"{url} is not a usable reasoning cache: {exc}; point REASONING_CACHE_URL "
            "at another database"
        ) from None
    except psycopg.Error as exc:
        raise store_error(exc, str(url), "the startup migration") from None
    if row is None or len(bytes(row[0])) != SECRET_BYTES:
        raise StoreCorrupt(f"reasoning cache {url}: the cache secret is malformed")
    return bytes(row[0])


def _quarantine_if_restored(conn: Conn) -> bool:
    """A database restored from a dump (``pg_restore`` into a new database: another
    cluster or database oid than the one that wrote it) is treated as the offline restore
    of a SQLite store is (design §7 backups): a fresh secret, every generation advanced
    (the coverage gap of everything served since the dump), every open intent poisoned
    and no lease carried over. Inside the startup transaction; whether it did."""
    row = conn.execute(
        # A managed service may deny pg_control_system(): the oid alone then (a dump
        # restored into another database still gets another oid).
        "SELECT CASE WHEN has_function_privilege('pg_control_system()', 'EXECUTE') "
        "THEN (SELECT system_identifier FROM pg_control_system())::text ELSE '' END "
        "|| ':' || (SELECT oid FROM pg_database WHERE datname = current_database())::text"
    ).fetchone()
    assert row is not None
    identity = str(row[0])
    stored = conn.execute("SELECT value FROM meta WHERE key = %s", (IDENTITY_KEY,)).fetchone()
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (%s, %s) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (IDENTITY_KEY, identity),
    )
    if stored is None or stored[0] == identity:
        return False
    conn.execute("DELETE FROM store_secret")
    conn.execute("UPDATE scopes SET generation = generation + 1")
    conn.execute(
        "INSERT INTO markers (scope_id, kind, digest, position, created_at) "
        "SELECT scope_id, %s, start_digest, position, created_at FROM intents "
        "ON CONFLICT DO NOTHING",
        (MarkerKind.START_POISON.value,),
    )
    conn.execute("DELETE FROM intents")
    conn.execute("DELETE FROM instances")
    return True
