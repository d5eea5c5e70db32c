"""Offline backup and restore: a new snapshot file of a stopped relay's store (design §7
backups; ``relay cache backup DEST``, ``relay cache restore SRC DEST``, and in place,
``relay cache restore --replace SRC``: :func:`replace_with_snapshot`).

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
(``.<name>.partial-<hex>``) with the copy engine (relay.storage.sqlite_copy) from a
connection on the source (relay.storage.offline: no relay owns it, none can start on it
meanwhile), fsyncs it and
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
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final

from relay.clock import Clock
from relay.errors import NotACache, SnapshotRefused, StoreCorrupt
from relay.settings.crashpoints import crash_point
from relay.storage.database import store_error
from relay.storage.disk_guard import (
    REPLACE_NOTE_KEY,
    blocked_message,
    blocked_path,
    fsync_dir,
    guard_path,
    partial_pattern,
    refuse_if_blocked,
    refuse_if_latched,
    replace_note,
    reserve_path,
)
from relay.storage.offline import open_stopped
from relay.storage.portable import full_fsync
from relay.storage.recovery import COVERAGE_GAP_KEY, recover_intents
from relay.storage.replay_store import ReasoningStore
from relay.storage.schema import SchemaRefused, check_version
from relay.storage.sqlite_copy import (
    OFFLINE_PAGES_PER_STEP,
    OPEN_COPY,
    check_room,
    copy_pages,
    create_private,
    fsync_file,
    publish,
    remove_copy,
    scrub_secret,
)

PAGES_PER_STEP: Final = OFFLINE_PAGES_PER_STEP
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
    conn = _open_source(source)
    try:
        schema_from = _source_schema(conn, source)
        _make_parent(dest)
        _check_room(conn, dest)
        with _blocked(dest) as publication:
            pages, recovered = _build(
                conn, source, dest, kind=kind, clock=clock, progress=progress,
                publication=publication,
            )  # fmt: skip
    finally:
        conn.close()
    return SnapshotResult(dest, dest.stat().st_size, pages, schema_from, recovered)


@dataclass(frozen=True)
class ReplaceResult:
    snapshot: SnapshotResult | None  # None: an earlier run had published it already
    live: Path
    kept: Path | None  # where the replaced store now is; None: there was none


def replace_with_snapshot(
    source: Path,
    live: Path,
    *,
    clock: Clock,
    progress: Progress | None = None,
) -> ReplaceResult:
    """``relay cache restore --replace SRC``: make ``live`` a new store copied from the
    backup ``source``, keeping the store it replaces under a new name beside it.

    ``live.blocked`` is written first, naming where the old store goes (``<live>.replaced-
    <UTC time>``), and stays until the copy is published durably, so no relay opens
    ``live`` meanwhile. Then: no relay may own the old store (:func:`open_stopped`, whose
    close also folds its WAL into the file); its files are renamed (the sidecars, then
    the store itself: ``rename`` is atomic, and nothing is ever deleted) and the directory
    fsynced; the copy is built and published as :func:`make_snapshot` does. A run killed
    anywhere leaves ``live.blocked``; running the same command again picks up where it
    stopped (the note says where the old store is kept): it moves what is left to move,
    makes the copy if it is not published, and removes ``live.blocked``. A failure before
    the move (a relay owns the store) removes ``live.blocked``; one after it leaves it."""
    source, live = Path(os.path.abspath(source)), Path(os.path.abspath(live))
    kept = replace_note(live)
    resuming = kept is not None
    if not resuming:
        _refuse_destination(live, allow=_LIVE_FILES)
    if os.path.lexists(live) and os.path.lexists(source) and os.path.samefile(source, live):
        raise SnapshotRefused(
            "source_is_live", f"{source} is the live store itself; name a backup file"
        )
    conn = _open_source(source)  # checked before anything is done to the live store
    try:
        schema_from = _source_schema(conn, source)
        _make_parent(live)
        if kept is None:
            kept = _kept_name(live, clock)
        with _blocked(live, note={REPLACE_NOTE_KEY: str(kept)}, resume=resuming) as publication:
            if os.path.lexists(live) and os.path.lexists(kept):
                # Published by the run that was killed (only it creates live while blocked).
                publication.linked = True
                fsync_dir(live.parent)
                publication.durable = True
                return ReplaceResult(None, live, kept)
            publication.moving = resuming  # a killed run may have moved some of it
            moved = (
                _move_aside(live, kept, publication)
                if os.path.lexists(live)
                else os.path.lexists(kept)
            )
            _remove_partials(live)
            _check_room(conn, live)
            pages, recovered = _build(
                conn, source, live, kind=SnapshotKind.RESTORE, clock=clock, progress=progress,
                publication=publication,
            )  # fmt: skip
    finally:
        conn.close()
    result = SnapshotResult(live, live.stat().st_size, pages, schema_from, recovered)
    return ReplaceResult(result, live, kept if moved else None)


def _open_source(source: Path) -> sqlite3.Connection:
    refuse_if_latched(source)
    refuse_if_blocked(source)
    return open_stopped(source)


def _build(
    conn: sqlite3.Connection,
    source: Path,
    dest: Path,
    *,
    kind: SnapshotKind,
    clock: Clock,
    progress: Progress | None,
    publication: _Publication,
) -> tuple[int, int]:
    """Copy, prepare, fsync and publish under a temporary name (removed on failure); the
    page count and the number of intents recovered."""
    temp = _temp_file(dest)
    try:
        pages = _copy(conn, source, temp, progress)
        recovered = _prepare(temp, kind, clock)
        crash_point("backup_prepared")
        fsync_file(temp)
        fsync_dir(dest.parent)
        _publish(temp, dest, publication)
    except BaseException:
        remove_copy(temp)
        raise
    return pages, recovered


# --- replacing the live store ------------------------------------------------------------

# The live store's own files, moved aside with it; any of them may be there.
_LIVE_FILES: Final = ("", "-wal", "-shm", "-journal", ".guard", ".reserve")


def _kept_name(live: Path, clock: Clock) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(clock.wall()))
    kept = live.with_name(f"{live.name}.replaced-{stamp}")
    while any(os.path.lexists(sibling) for sibling in destination_siblings(kept)):
        kept = live.with_name(f"{live.name}.replaced-{stamp}-{secrets.token_hex(2)}")
    return kept


def _move_aside(live: Path, kept: Path, publication: _Publication) -> bool:
    """Rename the stopped store ``live`` and its files to ``kept`` (refusing while a relay
    owns it), sidecars first, the store last; whether it was there to move."""
    open_stopped(live).close()  # StoreLocked while a relay owns it; folds its WAL
    publication.moving = True
    for suffix in (*_LIVE_FILES[1:], ""):
        here = live.with_name(live.name + suffix)
        if os.path.lexists(here):
            os.rename(here, kept.with_name(kept.name + suffix))
    fsync_dir(live.parent)
    crash_point("replace_moved_aside")
    return True


def _remove_partials(dest: Path) -> None:
    """The temporary copies a killed run left beside ``dest`` (never a store: a copy is
    only ever published by ``link`` under ``dest``)."""
    for partial in dest.parent.glob(partial_pattern(dest)):
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()


# --- the destination ---------------------------------------------------------------------


def _refuse_destination(dest: Path, *, allow: tuple[str, ...] = ()) -> None:
    """Refuse a destination that is, or was about to be, a store; ``allow``: the suffixes
    (of :func:`destination_siblings`) that may exist (a replacing restore moves them)."""
    message = blocked_message(dest)
    if message is not None:
        raise SnapshotRefused("destination_blocked", message)
    allowed = {dest.with_name(dest.name + suffix) for suffix in allow}
    for sibling in destination_siblings(dest):
        if sibling not in allowed and os.path.lexists(sibling):
            raise SnapshotRefused(
                "destination_exists",
                f"{sibling} exists: a backup or restore never replaces or reuses a store; "
                "choose a new destination path (or `relay cache restore --replace SRC`, "
                "which keeps the live store under a new name)",
            )


def _make_parent(dest: Path) -> None:
    try:
        if not dest.parent.exists():
            dest.parent.mkdir(mode=0o700, parents=True)
            dest.parent.chmod(0o700)  # mkdir's mode is filtered by the umask
    except OSError as exc:
        raise SnapshotRefused(
            "directory_unusable", f"cannot create {dest.parent}: {exc.strerror}"
        ) from None
    if not dest.parent.is_dir():
        raise SnapshotRefused("directory_unusable", f"{dest.parent} is not a directory")


def _check_room(conn: sqlite3.Connection, dest: Path) -> None:
    size = (
        conn.execute("PRAGMA page_count").fetchone()[0]
        * conn.execute("PRAGMA page_size").fetchone()[0]
    )
    check_room(dest.parent, size, FREE_MARGIN_BYTES)


@dataclass
class _Publication:
    linked: bool = False  # DEST is our copy (it may not be durable yet)
    durable: bool = False  # ... and its directory entry is on disk
    moving: bool = False  # a replacing restore has begun to move the live store aside


@contextlib.contextmanager
def _blocked(
    dest: Path, *, note: dict[str, str] | None = None, resume: bool = False
) -> Iterator[_Publication]:
    """``DEST.blocked`` for the whole copy: created first and durable before anything
    else is written, removed (durably) only after the publication is durable. A
    failure before publication removes it with the copy; a kill, or a failure once our
    copy is linked but maybe not durable, leaves it. ``note``: more to record in it (a
    replacing restore's ``kept``), which keeps it after any failure too: the live store
    may be moved already. ``resume``: it is there from a killed run of the same command."""
    blocked = blocked_path(dest)
    if not resume:
        _create_blocked(blocked, note or {})
    publication = _Publication()
    try:
        fsync_dir(dest.parent)
        if note:
            crash_point("replace_blocked")
        else:
            crash_point("backup_blocked")
        yield publication
    finally:
        if publication.durable or not (publication.linked or publication.moving):
            with contextlib.suppress(FileNotFoundError):
                blocked.unlink()
            fsync_dir(dest.parent)


def _create_blocked(blocked: Path, note: dict[str, str]) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(blocked, flags, 0o600)
    except FileExistsError:
        raise SnapshotRefused(
            "copy_in_progress", f"{blocked} appeared meanwhile: another copy is running"
        ) from None
    except OSError as exc:
        raise SnapshotRefused(
            "directory_unusable", f"cannot create {blocked}: {exc.strerror}"
        ) from None
    try:
        what = {"what": "a backup or restore is writing this store", "pid": os.getpid()}
        os.write(fd, json.dumps({**what, **note}).encode() + b"\n")
        full_fsync(fd)
    finally:
        os.close(fd)


def _temp_file(dest: Path) -> Path:
    return create_private(dest.with_name(partial_pattern(dest).replace("*", secrets.token_hex(8))))


def _publish(temp: Path, dest: Path, publication: _Publication) -> None:
    def linked() -> None:
        publication.linked = True

    try:
        publish(temp, dest, linked=linked)
    except FileExistsError:
        raise SnapshotRefused(
            "destination_exists", f"{dest} appeared meanwhile; it was left alone"
        ) from None
    publication.durable = True
    crash_point("backup_published")


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
    """The engine's copy of ``source`` into ``temp``; the page count."""

    def stepped(remaining: int, total: int) -> None:
        if progress is not None:
            progress(total - remaining, total)
        crash_point("backup_copying")

    def failed(exc: sqlite3.Error, step: str) -> Exception:
        return store_error(exc, temp, step) if step == OPEN_COPY else store_error(exc, source, step)

    return copy_pages(conn, temp, pages=PAGES_PER_STEP, stepped=stepped, failed=failed)


def _prepare(temp: Path, kind: SnapshotKind, clock: Clock) -> int:
    """Make the raw copy a new store: the old secret deleted (so that opening it creates a
    fresh one, as for any new store), then opened as a store (migrated), its intents
    recovered and its coverage gap recorded in one transaction. The number of intents."""
    try:
        raw = sqlite3.connect(temp, isolation_level=None)
        try:
            raw.execute("PRAGMA locking_mode = EXCLUSIVE")  # no -shm beside the copy
            scrub_secret(raw)  # the old secret's bytes are zeroed
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
