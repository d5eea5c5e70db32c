"""The one SQLite copy engine (design §7): a store copied page by page with SQLite's online
backup API into a new private file, prepared there, fsynced and published by ``link``,
which never replaces a file. Two callers, each keeping its own guarantees:

- the offline backup and restore (relay.storage.backup): a stopped store, read from the
  connection of relay.storage.offline, :data:`OFFLINE_PAGES_PER_STEP` pages per step, the
  copy then made a new store (fresh secret, migrated, intents recovered), published under
  ``DEST.blocked``;
- the online inspection snapshot (relay.ops.snapshot): the live store, read from its
  owner's own connection (no second connection could read the exclusively locked file),
  :data:`ONLINE_PAGES_PER_STEP` pages per step in lockstep with the IOLoop: before every
  step the worker thread waits for ``wait_turn`` and after it reports through
  ``stepped``, so a step never overlaps the loop's own use of the connection. Writes the
  owner makes between steps go to the copy too (the same connection), so it is consistent
  as of its last step. :func:`make_inspection_export` then prepares it, on the copy's own
  connection, never the source.

Errors: the destination and the publication raise :class:`SnapshotRefused` (with a
code); a failed SQLite step goes through the caller's ``failed`` translation
(:class:`CopyFailed` by default, whose message names the step and SQLite's error code,
never a stored value).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Final

from relay.errors import OperatorError, SnapshotRefused
from relay.storage.disk_guard import fsync_dir
from relay.storage.portable import full_fsync

OFFLINE_PAGES_PER_STEP: Final = 256  # 1 MiB of 4 KiB pages between progress reports
ONLINE_PAGES_PER_STEP: Final = 32  # the IOLoop waits for one step: a few ms at most

OPEN_COPY: Final = "open the copy"  # the SQLite steps a ``failed`` translation is told
COPY: Final = "copy"


class CopyFailed(OperatorError):
    """The copy could not be made; the message names the step, never a stored value."""


Failed = Callable[[sqlite3.Error, str], Exception]  # (error, OPEN_COPY or COPY) -> raised


def sqlite_code(exc: sqlite3.Error) -> str:
    return getattr(exc, "sqlite_errorname", None) or type(exc).__name__


def copy_failed(exc: sqlite3.Error, step: str) -> CopyFailed:
    what = "cannot open the copy" if step == OPEN_COPY else "the online backup failed"
    return CopyFailed(f"{what} ({sqlite_code(exc)})")


def check_room(directory: Path, source_bytes: int, margin: int) -> None:
    """Refuse (``no_space``) unless ``directory`` has the source's size plus ``margin``."""
    free = shutil.disk_usage(directory).free
    if free < source_bytes + margin:
        raise SnapshotRefused(
            "no_space",
            f"{directory} has {free} bytes free; the copy needs the store's {source_bytes} "
            f"bytes plus {margin}",
        )


def create_private(path: Path) -> Path:
    """Create the new empty file ``path`` (0600, never an existing one or a symlink)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        os.close(os.open(path, flags, 0o600))
    except OSError as exc:
        raise SnapshotRefused(
            "directory_unusable", f"cannot create a file in {path.parent}: {exc.strerror}"
        ) from None
    return path


def copy_pages(
    source: sqlite3.Connection,
    target: Path,
    *,
    pages: int,
    stepped: Callable[[int, int], None],
    wait_turn: Callable[[], None] | None = None,
    failed: Failed = copy_failed,
) -> int:
    """Copy ``source`` into the new file ``target``, ``pages`` pages per step; the page
    count. ``stepped(remaining, total)`` follows every step; ``wait_turn`` (online: the
    worker thread's lockstep with the IOLoop) blocks before the first step and between
    steps until the next one may run."""
    total = [0]
    try:
        dest = sqlite3.connect(target, isolation_level=None)
    except sqlite3.Error as exc:
        raise failed(exc, OPEN_COPY) from None
    try:

        def progress(status: int, remaining: int, count: int) -> None:
            total[0] = count
            stepped(remaining, count)
            if remaining > 0 and wait_turn is not None:
                wait_turn()

        if wait_turn is not None:
            wait_turn()
        source.backup(dest, pages=pages, progress=progress)
    except sqlite3.Error as exc:
        raise failed(exc, COPY) from None
    finally:
        dest.close()
    return total[0]


def scrub_secret(copy: sqlite3.Connection) -> None:
    """Delete the cache-local secret from the copy, its bytes overwritten
    (``secure_delete``); inside the caller's transaction, if any."""
    copy.execute("PRAGMA secure_delete = ON")
    copy.execute("DELETE FROM meta WHERE key = 'secret'")


def make_inspection_export(target: Path, *, marked_at: float) -> None:
    """Turn the raw online copy at ``target`` into an inspection export: a single-file
    rollback-journal database, the secret deleted with ``secure_delete`` (its bytes
    overwritten, no journal on disk holding them, no free page keeping an old copy), marked
    as an inspection copy with a coverage gap (were it ever opened as a cache, its
    generations would be quarantined), and checked with ``integrity_check``."""
    try:
        dest = sqlite3.connect(target, isolation_level=None)
    except sqlite3.Error as exc:
        raise CopyFailed(f"cannot reopen the copy ({sqlite_code(exc)})") from None
    try:
        # MEMORY: the pages that held the secret are never written to a journal file.
        mode = dest.execute("PRAGMA journal_mode = MEMORY").fetchone()[0]
        if str(mode).lower() != "memory":
            raise CopyFailed(f"cannot leave WAL mode in the copy (got {mode})")
        dest.execute("BEGIN IMMEDIATE")
        scrub_secret(dest)
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
        raise CopyFailed(f"cannot prepare the copy ({sqlite_code(exc)})") from None
    finally:
        dest.close()


def fsync_file(path: Path, *, read_only: bool = False) -> None:
    """Make ``path``'s bytes durable; ``read_only``: and make it 0400."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        full_fsync(fd)
        if read_only:
            os.fchmod(fd, 0o400)
    finally:
        os.close(fd)


def publish(temp: Path, final: Path, *, linked: Callable[[], None] | None = None) -> None:
    """Publish the fsynced copy ``temp`` as ``final`` by ``link`` (never replaces: a file
    that is there raises ``FileExistsError`` for the caller to decide), call ``linked``,
    remove the temporary name and fsync the directory."""
    try:
        os.link(temp, final)
    except FileExistsError:
        raise
    except OSError as exc:
        raise SnapshotRefused("cannot_publish", f"cannot publish {final}: {exc.strerror}") from None
    if linked is not None:
        linked()
    with contextlib.suppress(FileNotFoundError):
        temp.unlink()
    fsync_dir(final.parent)


def remove_copy(temp: Path) -> None:
    """A copy not published, with whatever SQLite left beside it."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            temp.with_name(temp.name + suffix).unlink()
