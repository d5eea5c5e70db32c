"""The store of a stopped relay, opened by the offline commands (``relay cache backup``,
``restore``, ``verify``; design §7 backups).

:func:`open_stopped` returns one connection that proves no relay owns the file and keeps
one from taking it while the command runs, and that never writes. A relay holds its store
with ``locking_mode=EXCLUSIVE`` in WAL mode from its startup write until it exits, so any
other connection's lock attempt gets ``SQLITE_BUSY`` at once (``timeout=0``); that is
translated into "a relay owns it". The connection takes the same exclusive lock itself
(``BEGIN IMMEDIATE``, rolled back; exclusive mode keeps the lock until close), so a relay
started meanwhile stops with ``StoreLocked`` rather than writing under a copy, and then
turns ``query_only`` on. It is opened read-write, not ``mode=ro``: the WAL a killed relay
left must be read, and a read-only connection cannot recover it without a ``-shm`` file.
Closing it folds that WAL into the file, as the relay's own startup would; a command
killed meanwhile leaves the file as it was, with at most an empty ``-wal`` beside it.

Before SQLite sees the file, its first bytes tell an empty or non-SQLite file apart
(:class:`NotACache`): SQLite takes an empty file for a new database (schema version 0)
and calls any other "not a database", neither of which says what the file is.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import quote

from relay.errors import NotACache, StoreIOError, StoreLocked
from relay.storage.database import store_error

_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
SQLITE_MAGIC = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite file


def open_stopped(path: Path) -> sqlite3.Connection:
    """A read-only-intent connection holding the store's exclusive lock; raises
    :class:`StoreLocked` ("a relay owns <path>; stop it first") while a relay owns it and
    :class:`StoreIOError` when there is no such file."""
    if not path.is_file():
        raise StoreIOError(f"there is no reasoning cache at {path}")
    _check_header(path)
    try:
        # mode=rw: never create the file.
        conn = sqlite3.connect(
            f"file:{quote(str(path))}?mode=rw", uri=True, timeout=0, isolation_level=None
        )
    except sqlite3.Error as exc:
        raise store_error(exc, path, "open") from None
    try:
        conn.execute("PRAGMA locking_mode = EXCLUSIVE")
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            code = getattr(exc, "sqlite_errorcode", -1) & 0xFF
            if code in _BUSY:
                raise StoreLocked(
                    f"a relay owns {path}; stop it first",
                    sqlite_error=getattr(exc, "sqlite_errorname", None),
                ) from None
            raise
        conn.execute("ROLLBACK")
        conn.execute("PRAGMA query_only = ON")
    except sqlite3.Error as exc:
        conn.close()
        raise store_error(exc, path, "lock") from None
    except BaseException:
        conn.close()
        raise
    return conn


def _check_header(path: Path) -> None:
    try:
        with path.open("rb") as file:
            head = file.read(len(SQLITE_MAGIC))
    except OSError:
        return  # the open below reports it, naming the cause
    if not head:
        raise NotACache(f"{path} is empty: not a relay cache")
    if head != SQLITE_MAGIC:
        raise NotACache(f"{path} is not an SQLite database: not a relay cache")
