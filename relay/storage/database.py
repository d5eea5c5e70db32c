"""The replay store's SQLite database: opening, exclusive ownership, PRAGMAs, transactions
and error translation (design §6). The table gateways (:mod:`relay.storage.scopes`,
``observations``, ``payloads``, ``markers``, ``intents``, ``meta``, ``strict_store``,
``cleanup``) reach the connection only through :meth:`Database.read`,
:meth:`Database.write` and :meth:`Database.transaction`.

One process owns the database: ``locking_mode=EXCLUSIVE`` plus a startup write means a
second relay on the same file fails at :meth:`Database.open` with
:class:`~relay.errors.StoreLocked` instead of silently sharing safety state. WAL,
``synchronous=FULL`` (with ``fullfsync`` for macOS) and foreign keys are always on.

Writes happen only inside :meth:`Database.transaction` (``BEGIN IMMEDIATE``), so a caller
groups every row of one decision into one all-or-nothing commit; a write called outside
one raises ``RuntimeError``. Reads work inside or outside.

Every ``sqlite3`` error leaving a gateway is a :class:`~relay.errors.StoreError` subclass
whose message names the database path and SQLite's error code, never a value: payloads
are ciphertext and scope values are credential fingerprints.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Final

from relay.clock import Clock
from relay.core.disk_policy import DEFAULT_RESERVE_BYTES, wal_policy
from relay.errors import StoreCorrupt, StoreError, StoreFull, StoreIOError, StoreLocked
from relay.storage.schema import VACUUM_PENDING_KEY, SchemaRefused, migrate

SECRET_BYTES: Final = 32
# How many transactions in a row may leave the WAL's checkpoint to a later commit
# (:meth:`Database.transaction`, ``before_send``): the WAL then exceeds its bound by at
# most this many small transactions' frames (design §21).
MAX_DEFERRED_CHECKPOINTS: Final = 8

# How a gateway reaches the connection: ``access("read a scope")`` yields it and translates
# any sqlite3 error raised in the block into a StoreError naming that action.
Access = Callable[[str], AbstractContextManager[sqlite3.Connection]]
Transaction = Callable[[], AbstractContextManager[None]]


def store_error(exc: sqlite3.Error, path: Path, action: str) -> StoreError:
    """Translate a sqlite3 error using its code only: its text may quote stored values."""
    name = getattr(exc, "sqlite_errorname", None)
    code = getattr(exc, "sqlite_errorcode", None)
    label = name or type(exc).__name__
    primary = -1 if code is None else code & 0xFF
    if primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return StoreLocked(
            f"another relay process owns the reasoning cache {path} ({label}); stop it "
            "or set REASONING_CACHE_PATH to another file",
            sqlite_error=name,
        )
    if primary == sqlite3.SQLITE_FULL:
        return StoreFull(
            f"reasoning cache {path}: {action} failed: the disk or the database size "
            f"limit is full ({label}); free disk space",
            sqlite_error=name,
        )
    if primary in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_FORMAT):
        return StoreCorrupt(
            f"reasoning cache {path}: {action} failed: the file is damaged or not a SQLite "
            f"database ({label}); move it aside or set REASONING_CACHE_PATH to another file",
            sqlite_error=name,
        )
    io_codes = (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY,
                sqlite3.SQLITE_PERM, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_PROTOCOL)  # fmt: skip
    if primary in io_codes:
        return StoreIOError(
            f"reasoning cache {path}: {action} failed ({label}); check the file, its "
            "directory and their permissions",
            sqlite_error=name,
        )
    return StoreError(f"reasoning cache {path}: {action} failed ({label})", sqlite_error=name)


def _vacuum_if_pending(conn: sqlite3.Connection) -> None:
    """Reclaim the pages a committed migration freed (schema.DROPS_DATA), once: VACUUM
    cannot run inside the migration's transaction, so the flag that transaction wrote says
    it is still to do. VACUUM is atomic; a crash before it or before the flag's deletion
    only means the next start does it (again). Without room for VACUUM's temporary copy
    (SQLITE_FULL) the store is used as it is and the next start tries again."""
    if conn.execute("SELECT 1 FROM meta WHERE key = ?", (VACUUM_PENDING_KEY,)).fetchone():
        try:
            conn.execute("VACUUM")
        except sqlite3.Error as exc:
            if getattr(exc, "sqlite_errorcode", -1) & 0xFF != sqlite3.SQLITE_FULL:
                raise
            return
        conn.execute("DELETE FROM meta WHERE key = ?", (VACUUM_PENDING_KEY,))


def _take_ownership(
    conn: sqlite3.Connection, path: Path, clock: Clock, reserve_bytes: int
) -> bytes:
    """Set the PRAGMAs, migrate, and prove the lock with a write; returns the secret."""
    action = "open"
    try:
        # EXCLUSIVE before WAL: the WAL index then lives in process memory (no -shm)
        # and the first write's lock is kept until close.
        conn.execute("PRAGMA locking_mode = EXCLUSIVE")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreIOError(f"reasoning cache {path}: cannot enable WAL (got {mode})")
        conn.execute("PRAGMA synchronous = FULL")
        # macOS: flush the drive's cache too (F_FULLFSYNC), or a power loss may undo a
        # commit fsync reported done; no-ops elsewhere (relay.storage.portable).
        conn.execute("PRAGMA fullfsync = ON")
        conn.execute("PRAGMA checkpoint_fullfsync = ON")
        conn.execute("PRAGMA foreign_keys = ON")
        # Disk pressure (design §6): a WAL bounded by the reserve, emptied into the
        # database before the startup write needs room for its own frames.
        wal = wal_policy(reserve_bytes, conn.execute("PRAGMA page_size").fetchone()[0])
        conn.execute(f"PRAGMA wal_autocheckpoint = {wal.autocheckpoint_pages:d}")
        conn.execute(f"PRAGMA journal_size_limit = {wal.journal_size_limit:d}")
        action = "the startup checkpoint"
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        action = "the startup write"
        conn.execute("BEGIN IMMEDIATE")
        try:
            migrate(conn)
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('secret', ?) ON CONFLICT (key) DO NOTHING",
                (secrets.token_bytes(SECRET_BYTES),),
            )
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('opened_at', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (clock.wall(),),
            )
            secret = conn.execute("SELECT value FROM meta WHERE key = 'secret'").fetchone()
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        action = "the post-migration VACUUM"
        _vacuum_if_pending(conn)
    except SchemaRefused as exc:
        raise StoreCorrupt(
            f"{path} is not a usable reasoning cache: {exc}; move it aside or set "
            "REASONING_CACHE_PATH to another file"
        ) from None
    except sqlite3.Error as exc:
        raise store_error(exc, path, action) from None
    if not isinstance(secret[0], bytes) or len(secret[0]) != SECRET_BYTES:
        raise StoreCorrupt(f"reasoning cache {path}: the cache secret is malformed")
    return secret[0]


class Database:
    """The one connection to the store's file, owned exclusively by this process."""

    def __init__(self, conn: sqlite3.Connection, path: Path, secret: bytes) -> None:
        """Use :meth:`open`."""
        self._conn: sqlite3.Connection | None = conn
        self.path = path
        self.secret = secret
        self._in_transaction = False
        # The WAL bound in pages (wal_policy, set at open) and how many commits in a row
        # have left its checkpoint to a later one.
        self._autocheckpoint: int = conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
        self._deferred = 0

    @classmethod
    def open(
        cls, path: Path, *, clock: Clock, reserve_bytes: int = DEFAULT_RESERVE_BYTES
    ) -> Database:
        """Open (creating if needed) and take exclusive ownership of the store at ``path``.
        The WAL is bounded to ``reserve_bytes`` (see :func:`~relay.core.disk_policy.
        wal_policy`) and checkpointed before the startup write, so a full volume whose WAL
        holds the space can still be opened.

        Raises :class:`StoreLocked` when another process holds it, :class:`StoreCorrupt`
        for a file that is not a usable reasoning cache, other :class:`StoreError`\\ s for
        I/O trouble.
        """
        try:
            if not path.parent.exists():
                path.parent.mkdir(mode=0o700, parents=True)
                path.parent.chmod(0o700)  # mkdir's mode is filtered by the umask
            if not path.exists():
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                os.close(os.open(path, flags, 0o600))
        except OSError as exc:
            raise StoreIOError(
                f"cannot create the reasoning cache {path}: {exc.strerror}; check the "
                "directory and its permissions"
            ) from None
        try:
            # check_same_thread off for one caller only: the inspection copy's worker thread,
            # which steps the backup while the IOLoop waits (relay.storage.sqlite_copy).
            conn = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise store_error(exc, path, "open") from None
        try:
            secret = _take_ownership(conn, path, clock, reserve_bytes)
            for suffix in ("", "-wal", "-shm", "-journal"):
                sibling = path.with_name(path.name + suffix)
                if sibling.exists():
                    sibling.chmod(0o600)
        except OSError as exc:
            conn.close()
            raise StoreIOError(f"cannot restrict {path} to its owner: {exc.strerror}") from None
        except BaseException:
            conn.close()
            raise
        return cls(conn, path, secret)

    @property
    def connection(self) -> sqlite3.Connection | None:
        """The open connection (``None`` once closed): for the page copy and for tests that
        tamper with rows; everything else goes through :meth:`read` and :meth:`write`."""
        return self._conn

    @property
    def in_transaction(self) -> bool:
        return self._in_transaction

    def close(self) -> None:
        """Release the lock and the file; calling it again does nothing."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    @contextmanager
    def read(self, action: str) -> Iterator[sqlite3.Connection]:
        if self._conn is None:
            raise StoreError(f"reasoning cache {self.path} is closed")
        try:
            yield self._conn
        except sqlite3.Error as exc:
            raise store_error(exc, self.path, action) from None

    def write(self, action: str) -> AbstractContextManager[sqlite3.Connection]:
        if not self._in_transaction:
            raise RuntimeError(f"{action} must run inside ReasoningStore.transaction()")
        return self.read(action)

    @contextmanager
    def transaction(self, *, before_send: bool = False) -> Iterator[None]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``; ``ROLLBACK`` when the body raises.

        ``before_send``: a commit that a request waits for before it is forwarded (the
        dispatch intent, a bypass poison). SQLite checkpoints the WAL in whichever commit
        finds it over its bound, and a checkpoint (copying up to the bound's pages into
        the database and an fsync of each file) would then delay that request's first
        token; such a commit leaves it to the next ordinary one, which checkpoints as
        soon as it commits, up to :data:`MAX_DEFERRED_CHECKPOINTS` in a row. Durability
        is the same: the commit's own fsync of the WAL is what makes it durable.
        """
        if self._in_transaction:
            raise RuntimeError("ReasoningStore transactions do not nest")
        defer = before_send and self._autocheckpoint > 0
        defer = defer and self._deferred < MAX_DEFERRED_CHECKPOINTS
        with self.read("begin a transaction") as conn:
            if defer:
                conn.execute("PRAGMA wal_autocheckpoint = 0")
            try:
                conn.execute("BEGIN IMMEDIATE")
            except BaseException:
                self._restore_checkpoint(defer)
                raise
        self._in_transaction = True
        try:
            yield
            with self.read("commit") as conn:
                conn.execute("COMMIT")
            self._deferred = self._deferred + 1 if defer else 0
        except BaseException:
            # SQLite may already have rolled back (e.g. after SQLITE_FULL).
            with self.read("roll back") as conn:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            raise
        finally:
            self._in_transaction = False
            self._restore_checkpoint(defer)

    def _restore_checkpoint(self, deferred: bool) -> None:
        if deferred:
            with self.read("restore the WAL bound") as conn:
                conn.execute(f"PRAGMA wal_autocheckpoint = {self._autocheckpoint:d}")

    def checkpoint(self) -> None:
        """Copy the WAL into the database and truncate it (after cleanup, at shutdown)."""
        with self.read("checkpoint") as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    def used_bytes(self) -> int:
        """Database bytes in use: pages minus free pages (which later writes reuse)."""
        with self.read("measure the database") as conn:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
            size = conn.execute("PRAGMA page_size").fetchone()[0]
        return int((pages - free) * size)
