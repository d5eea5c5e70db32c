"""The files beside the replay store that keep it safe on a full disk (design §6 "Disk
pressure"): the physical reserve and the ``.guard`` latch. The decisions are in
:mod:`relay.core.disk_policy`; this module only touches files.

- ``<db>.reserve``: ``REASONING_CACHE_RESERVE_BYTES`` of real blocks
  (:func:`relay.storage.portable.preallocate`: ``posix_fallocate``, macOS's ``F_PREALLOCATE`` or
  written zeros; never a sparse file: a sparse file frees nothing when deleted).
  Deleting it is how the cache makes room for a safety write on a full disk.
- ``<db>.guard``: written when a safety write failed even after the reserve was released.
  While it exists no relay reuses the store (:func:`refuse_if_latched`); the operator
  frees space, checks the store and deletes it (docs/replay-cache.md, *Disk pressure*).

One more sibling latch is not about disk pressure but is refused at the same place:
``<db>.blocked``, written first by an offline backup or restore into ``<db>`` and
removed only once the copy is published durably (relay.storage.backup). While it exists
the file may be half made, so no relay opens it (:func:`refuse_if_blocked`). A replacing
restore records in it where the store it replaces is kept (:func:`replace_note`).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from relay.core.disk_policy import DiskState, may_recreate_reserve
from relay.errors import StoreBlocked, StoreError, StoreLatched
from relay.storage.portable import full_fsync, preallocate


def reserve_path(db: Path) -> Path:
    return db.with_name(db.name + ".reserve")


def guard_path(db: Path) -> Path:
    return db.with_name(db.name + ".guard")


def blocked_path(db: Path) -> Path:
    return db.with_name(db.name + ".blocked")


def partial_pattern(db: Path) -> str:
    """The names a backup or restore into ``db`` builds its copy under (a glob)."""
    return f".{db.name}.partial-*"


REPLACE_NOTE_KEY = "kept"  # in a replacing restore's .blocked: where the old store goes


def replace_note(db: Path) -> Path | None:
    """Where a ``relay cache restore --replace`` into ``db`` that did not finish keeps the
    store it replaces (recorded in ``<db>.blocked``); ``None`` for any other ``.blocked``
    or none."""
    with contextlib.suppress(OSError, ValueError, TypeError):
        note = json.loads(blocked_path(db).read_text(encoding="utf-8"))
        if isinstance(note, dict) and isinstance(note.get(REPLACE_NOTE_KEY), str):
            return Path(note[REPLACE_NOTE_KEY])
    return None


def blocked_message(db: Path) -> str | None:
    """What to do about ``<db>.blocked`` (one line), or ``None`` when it does not exist."""
    blocked = blocked_path(db)
    if not blocked.exists():
        return None
    kept = replace_note(db)
    if kept is not None:  # deleting anything here could delete the store being replaced
        return (
            f"{blocked} exists: a `relay cache restore --replace` into {db} did not finish; "
            f"the store it replaces is kept, at {db} or {kept}; run the same `relay cache "
            "restore --replace SRC` again to finish it (it picks up where it stopped)"
        )
    return (
        f"{blocked} exists: a backup or restore into {db} did not finish, so it may be "
        f"incomplete; delete {db} (if there), its -wal file, {partial_pattern(db)} beside it "
        f"and {blocked}, then run `relay cache backup` or `relay cache restore` again"
    )


def refuse_if_blocked(db: Path) -> None:
    """Raise :class:`StoreBlocked` (one line: what happened, what to do) while a backup or
    restore into ``db`` has not finished (``<db>.blocked`` exists)."""
    message = blocked_message(db)
    if message is not None:
        raise StoreBlocked(message)


def refuse_if_latched(db: Path) -> None:
    """Raise :class:`StoreLatched` (one line: what happened, what to do) while the store's
    ``.guard`` exists."""
    guard = guard_path(db)
    if not guard.exists():
        return
    reason = "reason unknown"
    # Whatever the file holds (it may be empty, cut short or edited), the refusal stands.
    with contextlib.suppress(OSError, ValueError, LookupError, TypeError, RecursionError):
        recorded = json.loads(guard.read_text(encoding="utf-8"))
        reason = f"{recorded['what']} failed with {recorded['code']}"
    raise StoreLatched(
        f"{guard} exists: the cache stopped because a safety write could not be made "
        f"({reason}); free space on {db.parent}, check the store with "
        f"`sqlite3 {db} 'PRAGMA integrity_check'`, then delete {guard} to reuse it "
        "(or set REASONING_CACHE_PATH to a new file)"
    )


class DiskGuard:
    """The reserve and latch of one store file."""

    def __init__(self, db: Path, reserve_bytes: int) -> None:
        self.db = db
        self.reserve_bytes = reserve_bytes
        self.reserve = reserve_path(db)
        self.guard = guard_path(db)
        self.latched = False
        self.allocated_by: str | None = None  # how the reserve was last made (portable)
        self.cannot_hold = False  # this volume keeps no real blocks for a written reserve

    # --- the reserve ------------------------------------------------------------------

    @property
    def reserve_held(self) -> bool:
        """Whether the reserve file is there with all its blocks allocated."""
        return self._allocated()

    def _allocated(self) -> bool:
        try:
            st = self.reserve.stat()
        except OSError:
            return False
        return st.st_size == self.reserve_bytes and st.st_blocks * 512 >= self.reserve_bytes

    def ensure_reserve(self) -> bool:
        """Allocate the reserve if it is missing, short or sparse and the volume has room
        for it twice over; whether it is held afterwards. Never raises for lack of room."""
        if self.reserve_held:
            return True
        if self.cannot_hold:
            return False
        with contextlib.suppress(FileNotFoundError):
            self.reserve.unlink()  # a short or wrong-sized one: start again
        if not may_recreate_reserve(self.free_bytes(), self.reserve_bytes):
            return False
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.reserve, flags, 0o600)
        except OSError:
            return False
        try:
            self.allocated_by = preallocate(fd, self.reserve_bytes)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                self.reserve.unlink()
            return False
        os.close(fd)
        if not self._allocated():
            # Written whole and still without its blocks (a volume that compresses or
            # deduplicates zeros): it would free nothing, and trying again on every payload
            # would write it again each time.
            self.cannot_hold = True
            with contextlib.suppress(OSError):
                self.reserve.unlink()
            return False
        return True

    def release_reserve(self) -> bool:
        """Delete the reserve, giving its blocks back to the volume; whether there was one."""
        try:
            self.reserve.unlink()
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StoreError(
                f"cannot release the reasoning cache reserve {self.reserve}: {exc.strerror}"
            ) from None
        return True

    # --- measurements -----------------------------------------------------------------

    def free_bytes(self) -> int:
        try:
            st = os.statvfs(self.db.parent)
        except OSError:
            return 0
        return st.f_bavail * st.f_frsize

    def state(self, used_bytes: int) -> DiskState:
        return DiskState(used_bytes, self.free_bytes(), self.reserve_held)

    # --- the latch --------------------------------------------------------------------

    def latch(self, what: str, code: str | None, now: float) -> bool:
        """Stop this store for good: ``latched`` at once, and ``.guard`` written so that no
        later process reuses it. Whether the file could be written (its absence after a
        failure is logged by the caller; the in-memory latch holds either way)."""
        self.latched = True
        record = json.dumps({"what": what, "code": code or "unknown", "at": now})
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.guard, flags, 0o600)
        except OSError:
            return False
        try:
            os.write(fd, record.encode("utf-8") + b"\n")
            full_fsync(fd)
        except OSError:
            pass  # an empty guard still latches: refuse_if_latched only needs it to exist
        finally:
            os.close(fd)
        with contextlib.suppress(OSError):  # make the new directory entry durable
            fsync_dir(self.db.parent)
        return self.guard.exists()


def fsync_dir(directory: Path) -> None:
    """Make the entries of ``directory`` (a file created, linked or removed) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        full_fsync(fd)
    finally:
        os.close(fd)
