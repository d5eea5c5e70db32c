"""``relay admin snapshot``: a private inspection copy of the live store (design §18).

One copy at a time, through the copy engine (relay.storage.sqlite_copy) on the owner's
connection, 32 pages per step in lockstep with the IOLoop: the loop hands the
worker thread one step, waits for it, then yields, so requests keep flowing and a step
never overlaps the loop's own use of the connection. Before starting: the source must be
at most 256 MiB and the destination must have the source's size plus 64 MiB free.

The copy goes to ``RELAY_ADMIN_SNAPSHOT_DIR`` (0700) under a temporary name, is made an
inspection export there (secret deleted, integrity checked), fsynced, made read-only
(0400) and only then published under its final name -- linked, so an earlier snapshot is
never replaced -- and the directory fsynced. A failure leaves no file behind. Shutdown
waits for a running copy before closing the store (:meth:`Snapshotter.wait_idle`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from relay.clock import Clock
from relay.errors import SnapshotRefused, StoreError
from relay.storage.interface import StoreDiagnostics
from relay.storage.sqlite_copy import (
    ONLINE_PAGES_PER_STEP,
    CopyFailed,
    check_room,
    create_private,
    fsync_file,
    make_inspection_export,
    publish,
    remove_copy,
)

PAGES_PER_STEP: Final = ONLINE_PAGES_PER_STEP
FREE_MARGIN_BYTES: Final = 64 * 1024 * 1024
SOURCE_CEILING_BYTES: Final = 256 * 1024 * 1024
STEP_TIMEOUT_S: Final = 60.0  # one 32-page step; far more means something is stuck


@dataclass
class Progress:
    copied_pages: int = 0
    total_pages: int = 0
    started_wall: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"copiedPages": self.copied_pages, "totalPages": self.total_pages}


@dataclass(frozen=True)
class SnapshotResult:
    path: Path
    bytes: int
    pages: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "bytes": self.bytes, "pages": self.pages,
                "seconds": round(self.seconds, 3)}  # fmt: skip


ProgressListener = Callable[[Progress], None]


class Snapshotter:
    def __init__(
        self,
        store: StoreDiagnostics | None,
        directory: Path,
        clock: Clock,
    ) -> None:
        self.store = store
        self.directory = directory.expanduser()
        self.clock = clock
        self.progress: Progress | None = None  # the running copy's
        self.last: SnapshotResult | None = None
        self._task: asyncio.Task[SnapshotResult] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self, listener: ProgressListener | None = None) -> asyncio.Task[SnapshotResult]:
        """Check and start a copy (on the IOLoop). Raises :class:`SnapshotRefused`
        synchronously when one is running or the checks fail."""
        if self.running:
            raise SnapshotRefused(
                "snapshot_in_progress", "a snapshot is already being copied; wait for it"
            )
        store = self.store
        if store is None:
            raise SnapshotRefused(
                "no_store", "there is no reasoning cache store to copy (REASONING_CACHE_ENABLED)"
            )
        source = store.source_bytes()
        if source > SOURCE_CEILING_BYTES:
            raise SnapshotRefused(
                "source_too_large",
                f"the store is {source} bytes; inspection snapshots copy at most "
                f"{SOURCE_CEILING_BYTES} bytes",
            )
        self._private_directory()
        check_room(self.directory, source, FREE_MARGIN_BYTES)
        temp = create_private(self.directory / f".partial-{secrets.token_hex(8)}.sqlite")
        self.progress = Progress(started_wall=self.clock.wall())
        self._task = asyncio.ensure_future(self._run(store, temp, listener))
        return self._task

    async def wait_idle(self) -> None:
        """Return once no copy is running (shutdown: before the store closes)."""
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._task)

    # --- the copy ------------------------------------------------------------------------

    async def _run(
        self, store: StoreDiagnostics, temp: Path, listener: ProgressListener | None
    ) -> SnapshotResult:
        loop = asyncio.get_running_loop()
        started = self.clock.monotonic()
        try:
            pages = await self._copy(loop, store, temp, listener)
            marked_at = self.clock.wall()
            final = await loop.run_in_executor(None, self._publish, temp, marked_at)
        except BaseException:
            with contextlib.suppress(OSError):
                remove_copy(temp)  # nothing half-made is left behind
            raise
        finally:
            self.progress = None
        seconds = self.clock.monotonic() - started
        result = SnapshotResult(final, os.stat(final).st_size, pages, seconds)
        self.last = result
        return result

    async def _copy(
        self,
        loop: asyncio.AbstractEventLoop,
        store: StoreDiagnostics,
        temp: Path,
        listener: ProgressListener | None,
    ) -> int:
        turn, stepped = threading.Semaphore(0), threading.Semaphore(0)
        ended = threading.Event()
        report = [0, 0, 0]  # remaining, total, steps taken

        def wait_turn() -> None:
            if not turn.acquire(timeout=STEP_TIMEOUT_S):
                raise CopyFailed("the relay stopped handing out copy steps")

        def on_step(remaining: int, total: int) -> None:
            report[:] = [remaining, total, report[2] + 1]
            stepped.release()

        def worker() -> None:
            try:
                store.copy_for_inspection(
                    temp, pages=PAGES_PER_STEP, wait_turn=wait_turn, stepped=on_step
                )
            finally:
                ended.set()
                stepped.release()  # the loop may be waiting for a step that never came

        future = loop.run_in_executor(None, worker)
        reported = 0
        try:
            while True:
                turn.release()  # one step; the loop thread waits for it (a few ms at most)
                if not stepped.acquire(timeout=STEP_TIMEOUT_S):
                    raise SnapshotRefused("copy_stuck", "a copy step did not finish in time")
                remaining, total, steps = report
                if steps == reported:  # no step: the worker ended (an error, or done)
                    break
                reported = steps
                progress = self.progress
                if progress is not None:
                    progress.copied_pages, progress.total_pages = total - remaining, total
                    if listener is not None:
                        with contextlib.suppress(Exception):  # a client gone: copy on
                            listener(progress)
                if remaining == 0 or ended.is_set():
                    break
                await asyncio.sleep(0)  # requests run between steps
        finally:
            try:
                await future
            except (CopyFailed, StoreError) as exc:
                raise SnapshotRefused("copy_failed", f"the copy failed: {exc}") from None
        return report[1]

    def _publish(self, temp: Path, marked_at: float) -> Path:
        """Worker thread: make ``temp`` an inspection export and publish it."""
        try:
            make_inspection_export(temp, marked_at=marked_at)
        except CopyFailed as exc:
            raise SnapshotRefused("copy_failed", f"the copy failed: {exc}") from None
        fsync_file(temp, read_only=True)
        stamp = datetime.fromtimestamp(marked_at, UTC).strftime("%Y%m%dT%H%M%SZ")
        for n in range(1, 1000):
            suffix = "" if n == 1 else f"-{n}"
            final = self.directory / f"reasoning-cache-{stamp}{suffix}.sqlite"
            try:
                publish(temp, final)  # never replaces an earlier snapshot
            except FileExistsError:
                continue
            return final
        raise SnapshotRefused("no_name", f"too many snapshots at {stamp} in {self.directory}")

    # --- the destination ---------------------------------------------------------------

    def _private_directory(self) -> None:
        directory = self.directory
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = os.lstat(directory)
        except OSError as exc:
            raise SnapshotRefused(
                "directory_unusable", f"cannot create {directory}: {exc.strerror}"
            ) from None
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            raise SnapshotRefused(
                "directory_not_private",
                f"{directory} must be a directory owned by this user (not a symlink)",
            )
        if stat.S_IMODE(info.st_mode) & 0o077:
            raise SnapshotRefused(
                "directory_not_private",
                f"{directory} is accessible to others (mode {stat.S_IMODE(info.st_mode):o}); "
                "chmod 700 it: snapshots hold encrypted payloads",
            )
