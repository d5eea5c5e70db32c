"""An inspection copy of the live store through SQLite's online backup API (spec §11).

The copy is read from the owner's own connection (no second connection could read the
exclusively locked file), ``pages`` pages per step. :func:`copy_pages` runs on a worker
thread in lockstep with the IOLoop (relay.ops.snapshot): before every step it waits for
``turn`` and after it reports through ``stepped``, so a step never overlaps the loop's own
use of the connection, and the loop runs its other callbacks between steps. Writes the
owner makes between steps go to the copy too (the same connection), so it is consistent
as of its last step.

:func:`finish_copy` then makes the copy an inspection export: a single-file
rollback-journal database, the cache-local secret deleted with ``secure_delete`` (its
bytes overwritten, no journal on disk holding them, no free page keeping an old copy),
marked as an inspection copy with a coverage gap (were it ever opened as a cache, its
generations would be quarantined), and checked with ``integrity_check`` -- all on the
copy's own connection, never the source.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from relay.errors import OperatorError


class CopyFailed(OperatorError):
    """The copy could not be made; the message names the step, never a stored value."""


def copy_pages(
    source: sqlite3.Connection,
    target: Path,
    *,
    pages: int,
    wait_turn: Callable[[], None],
    stepped: Callable[[int, int], None],
) -> None:
    """Copy ``source`` into the new file ``target`` (worker thread). ``wait_turn`` blocks
    until the next step may run; ``stepped(remaining, total)`` follows every step."""
    try:
        dest = sqlite3.connect(target, isolation_level=None)
    except sqlite3.Error as exc:
        raise CopyFailed(f"cannot open the copy ({_code(exc)})") from None
    try:

        def progress(status: int, remaining: int, total: int) -> None:
            stepped(remaining, total)
            if remaining > 0:
                wait_turn()

        wait_turn()
        source.backup(dest, pages=pages, progress=progress)
    except sqlite3.Error as exc:
        raise CopyFailed(f"the online backup failed ({_code(exc)})") from None
    finally:
        dest.close()


def finish_copy(target: Path, *, marked_at: float) -> None:
    """Turn the raw copy at ``target`` into an inspection export (see the module doc)."""
    try:
        dest = sqlite3.connect(target, isolation_level=None)
    except sqlite3.Error as exc:
        raise CopyFailed(f"cannot reopen the copy ({_code(exc)})") from None
    try:
        # MEMORY: the pages that held the secret are never written to a journal file.
        mode = dest.execute("PRAGMA journal_mode = MEMORY").fetchone()[0]
        if str(mode).lower() != "memory":
            raise CopyFailed(f"cannot leave WAL mode in the copy (got {mode})")
        dest.execute("PRAGMA secure_delete = ON")
        dest.execute("BEGIN IMMEDIATE")
        dest.execute("DELETE FROM meta WHERE key = 'secret'")
        for key, value in (("inspection-copy", marked_at), ("coverage-gap", 1)):
            dest.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )
        dest.execute("COMMIT")
        # A free page copied from the source may still hold an older version of the meta
        # page: VACUUM rebuilds the file from live rows only.
        dest.execute("VACUUM")
        rows = [str(row[0]) for row in dest.execute("PRAGMA integrity_check")]
        if rows != ["ok"]:
            raise CopyFailed("the copy failed its integrity check")
    except sqlite3.Error as exc:
        raise CopyFailed(f"cannot prepare the copy ({_code(exc)})") from None
    finally:
        dest.close()


def _code(exc: sqlite3.Error) -> str:
    return getattr(exc, "sqlite_errorname", None) or type(exc).__name__
