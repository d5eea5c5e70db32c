"""Offline backup and restore: a new snapshot file of a stopped relay's store (design §7
backups; ``relay cache backup DEST``, ``relay cache restore SRC DEST``).

A snapshot is a *new* store, never the old one again:

- a fresh cache secret: the secret keys every scope fingerprint, so no scope digest of
  the source ever matches in the copy, whatever either holds later;
- ``coverage-gap`` = 1: the first enabled open advances every scope generation (the
  pre-snapshot generations are quarantined; payloads and markers stay), as after a
  caching-off interval, and begins the usual deletion barrier, as every start does;
- the copy's open intents are recovered (their positions poisoned, the intents removed),
  as startup recovery would;
- migrated to the current schema (the source is only read).

Crash safety. The destination is never overwritten or activated: the command refuses when
``DEST`` or any of its siblings (``-wal``, ``-shm``, ``-journal``, ``.guard``, ``.reserve``,
``.blocked``) exists. It writes ``DEST.blocked`` first (``O_EXCL``, fsynced with its
directory), builds the copy under a temporary name in ``DEST``'s directory
(``.<name>.partial-<hex>``) with SQLite's backup API from a connection on the source
(relay.storage.offline: no relay owns it, none can start on it meanwhile), fsyncs it and
the directory, publishes it by ``link`` (which never replaces a file), fsyncs the
directory again and only then removes ``DEST.blocked`` (and fsyncs once more). A relay
refuses a store whose ``.blocked`` exists (relay.storage.disk_guard), so a copy killed at
any point is never activated half made. A failure short of a kill removes what it made.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final

from relay.clock import Clock
from relay.crashpoints import crash_point
from relay.errors import NotACache, SnapshotRefused, StoreCorrupt
from relay.storage.disk_guard import (
    blocked_path,
    fsync_dir,
    guard_path,
    partial_pattern,
    refuse_if_blocked,
    refuse_if_latched,
    reserve_path,
)
from relay.storage.offline import open_stopped
from relay.storage.recovery import COVERAGE_GAP_KEY, recover_intents
from relay.storage.replay_store import ReasoningStore, store_error
from relay.storage.schema import SchemaRefused, check_version

PAGES_PER_STEP: Final = 256  # 1 MiB of 4 KiB pages between progress reports
FREE_MARGIN_BYTES: Final = 16 * 1024 * 1024  # the copy's own WAL and journal, and slack
SNAPSHOT_KEY: Final = "snapshot"  # meta: "backup" or "restore"
SNAPSHOT_AT_KEY: Final = "snapshot-at"  # meta: wall time the copy was made

Progress = Callable[[int, int], None]  # (pages copied, pages in all)


class SnapshotKind(StrEnum):
    BACKUP = "backup"  # the live store → a backup file
    RESTORE = "restore"  # a backup file → a new live store


@dataclass(frozen=True)
class SnapshotResult:
    path: Path
    bytes: int
    pages: int
    schema_from: int  # the source's schema version (the copy has the current one)
    recovered_intents: int


def destination_siblings(dest: Path) -> list[Path]:
    """Every file whose existence means ``dest`` is, or was about to be, a store."""
    names = ("", "-wal", "-shm", "-journal")
    return [dest.with_name(dest.name + suffix) for suffix in names] + [
        guard_path(dest),
        reserve_path(dest),
        blocked_path(dest),
    ]


def make_snapshot(
    source: Path,
    dest: Path,
    *,
    kind: SnapshotKind,
    clock: Clock,
    progress: Progress | None = None,
) -> SnapshotResult:
    """Copy the stopped store ``source`` into the new store ``dest`` (module docstring).
    Raises :class:`SnapshotRefused` for the destination, :class:`StoreError` subclasses
    for the source (``StoreLocked``: a relay owns it; ``StoreLatched``, ``StoreBlocked``,
    ``StoreCorrupt``)."""
    source, dest = Path(os.path.abspath(source)), Path(os.path.abspath(dest))
    _refuse_destination(dest)
    refuse_if_latched(source)
    refuse_if_blocked(source)
    conn = open_stopped(source)
    try:
        schema_from = _source_schema(conn, source)
        _make_parent(dest)
        _check_room(conn, dest)
        with _blocked(dest) as publication:
            temp = _temp_file(dest)
            try:
                pages = _copy(conn, source, temp, progress)
                recovered = _prepare(temp, kind, clock)
                crash_point("backup_prepared")
                _fsync_file(temp)
                fsync_dir(dest.parent)
                _publish(temp, dest, publication)
            except BaseException:
                _remove_copy(temp)
                raise
    finally:
        conn.close()
    return SnapshotResult(dest, dest.stat().st_size, pages, schema_from, recovered)


# --- the destination ---------------------------------------------------------------------


def _refuse_destination(dest: Path) -> None:
    blocked = blocked_path(dest)
    if blocked.exists():
        raise SnapshotRefused(
            f"{blocked} exists: an earlier backup or restore into {dest} did not finish; "
            f"delete {dest} (if there), its -wal file, {partial_pattern(dest)} beside it "
            f"and {blocked}, then run it again"
        )
    for sibling in destination_siblings(dest):
        if os.path.lexists(sibling):
            raise SnapshotRefused(
                f"{sibling} exists: a backup or restore never replaces or reuses a store; "
                "choose a new destination path"
            )


def _make_parent(dest: Path) -> None:
    try:
        if not dest.parent.exists():
            dest.parent.mkdir(mode=0o700, parents=True)
            dest.parent.chmod(0o700)  # mkdir's mode is filtered by the umask
    except OSError as exc:
        raise SnapshotRefused(f"cannot create {dest.parent}: {exc.strerror}") from None
    if not dest.parent.is_dir():
        raise SnapshotRefused(f"{dest.parent} is not a directory")


def _check_room(conn: sqlite3.Connection, dest: Path) -> None:
    size = (
        conn.execute("PRAGMA page_count").fetchone()[0]
        * conn.execute("PRAGMA page_size").fetchone()[0]
    )
    free = shutil.disk_usage(dest.parent).free
    if free < size + FREE_MARGIN_BYTES:
        raise SnapshotRefused(
            f"{dest.parent} has {free} bytes free; the copy needs the store's {size} bytes "
            f"plus {FREE_MARGIN_BYTES}"
        )


@dataclass
class _Publication:
    linked: bool = False  # DEST is our copy (it may not be durable yet)
    durable: bool = False  # ... and its directory entry is on disk


@contextlib.contextmanager
def _blocked(dest: Path) -> Iterator[_Publication]:
    """``DEST.blocked`` for the whole copy: created first and durable before anything
    else is written, removed (durably) only after the publication is durable. A
    failure before publication removes it with the copy; a kill, or a failure once our
    copy is linked but maybe not durable, leaves it."""
    blocked = blocked_path(dest)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(blocked, flags, 0o600)
    except FileExistsError:
        raise SnapshotRefused(f"{blocked} appeared meanwhile: another copy is running") from None
    except OSError as exc:
        raise SnapshotRefused(f"cannot create {blocked}: {exc.strerror}") from None
    try:
        note = {"what": "a backup or restore is writing this store", "pid": os.getpid()}
        os.write(fd, json.dumps(note).encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    publication = _Publication()
    try:
        fsync_dir(dest.parent)
        crash_point("backup_blocked")
        yield publication
    finally:
        if publication.durable or not publication.linked:
            with contextlib.suppress(FileNotFoundError):
                blocked.unlink()
            fsync_dir(dest.parent)


def _temp_file(dest: Path) -> Path:
    temp = dest.with_name(partial_pattern(dest).replace("*", secrets.token_hex(8)))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        os.close(os.open(temp, flags, 0o600))
    except OSError as exc:
        raise SnapshotRefused(f"cannot create a file in {dest.parent}: {exc.strerror}") from None
    return temp


def _remove_copy(temp: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            temp.with_name(temp.name + suffix).unlink()


def _publish(temp: Path, dest: Path, publication: _Publication) -> None:
    try:
        os.link(temp, dest)  # never replaces: a file that appeared meanwhile stays
    except FileExistsError:
        raise SnapshotRefused(f"{dest} appeared meanwhile; it was left alone") from None
    except OSError as exc:
        raise SnapshotRefused(f"cannot publish {dest}: {exc.strerror}") from None
    publication.linked = True
    with contextlib.suppress(FileNotFoundError):
        temp.unlink()
    fsync_dir(dest.parent)
    publication.durable = True
    crash_point("backup_published")


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- the copy ----------------------------------------------------------------------------


def _source_schema(conn: sqlite3.Connection, source: Path) -> int:
    try:
        version = check_version(conn)
    except SchemaRefused as exc:
        raise StoreCorrupt(
            f"{source} is not a reasoning cache this relay can copy: {exc}"
        ) from None
    except sqlite3.Error as exc:
        raise store_error(exc, source, "read the schema") from None
    if version == 0:  # no table at all (check_version refuses tables without a version)
        raise NotACache(f"{source} is an empty SQLite database: not a relay cache")
    return version


def _copy(conn: sqlite3.Connection, source: Path, temp: Path, progress: Progress | None) -> int:
    """SQLite's online backup of ``source`` into ``temp``; the page count."""
    copied = [0]

    def step(status: int, remaining: int, total: int) -> None:
        copied[0] = total
        if progress is not None:
            progress(total - remaining, total)
        crash_point("backup_copying")

    try:
        target = sqlite3.connect(temp, isolation_level=None)
    except sqlite3.Error as exc:
        raise store_error(exc, temp, "open the copy") from None
    try:
        conn.backup(target, pages=PAGES_PER_STEP, progress=step)
    except sqlite3.Error as exc:
        raise store_error(exc, source, "copy") from None
    finally:
        target.close()
    return copied[0]


def _prepare(temp: Path, kind: SnapshotKind, clock: Clock) -> int:
    """Make the raw copy a new store: the old secret deleted (so that opening it creates a
    fresh one, as for any new store), then opened as a store (migrated), its intents
    recovered and its coverage gap recorded in one transaction. The number of intents."""
    try:
        raw = sqlite3.connect(temp, isolation_level=None)
        try:
            raw.execute("PRAGMA locking_mode = EXCLUSIVE")  # no -shm beside the copy
            raw.execute("PRAGMA secure_delete = ON")  # the old secret's bytes are zeroed
            raw.execute("DELETE FROM meta WHERE key = 'secret'")
        finally:
            raw.close()
    except sqlite3.Error as exc:
        raise store_error(exc, temp, "prepare the copy") from None
    with ReasoningStore.open(temp, clock=clock) as store:
        now = clock.wall()
        with store.transaction():
            recovered = recover_intents(store, now)
            store.set_meta(COVERAGE_GAP_KEY, 1)
            store.set_meta(SNAPSHOT_KEY, kind.value)
            store.set_meta(SNAPSHOT_AT_KEY, now)
        if store.integrity_check() != ["ok"]:
            raise StoreCorrupt(f"the copy of {temp.name} failed its integrity check")
        store.checkpoint()
    return recovered
