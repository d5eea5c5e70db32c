"""``LOG_BODIES=1``: every request's and answer's bodies on disk, for debugging.

Sensitive (prompts, answers, tool results, ciphertext) and best-effort: a body log never
slows, fails or changes a model call. Per request, up to four *artifacts*:
``<time>-<request id>-client-request.json`` (the body the client sent),
``-upstream-request.json`` (what went upstream, each send appended), ``-upstream-response``
(the upstream's bytes as read) and ``-client-response`` (the bytes queued for the client),
in ``RELAY_LOG_BODIES_DIR`` (default ``<RELAY_DATA_DIR>/bodies``).

Bounds (design §18):

- an artifact holds at most :data:`ARTIFACT_LIMIT` bytes (8 MiB), then
  :data:`TRUNCATION_MARKER`, and takes nothing more;
- writes run in a pool of :data:`MAX_OUTSTANDING` (4) threads, and at most that many are
  outstanding across the process: a write that finds them all busy is not queued, it fails;
- a write not done within :data:`WRITE_TIMEOUT_S` (2 s, injected clock) fails (its thread
  still counts as outstanding until it returns);
- a failure disables that artifact's writer for good (no retry) with one sanitized warning
  (``body_log_failed``: the artifact kind and a reason code such as ``timeout``, ``busy``
  or an errno name like ``ENOSPC``; never a path, a message or a byte of the body).

What a writer buffers while its one write is in flight is bounded by the artifact limit,
so there is no unbounded queue anywhere. Files are created 0600 with ``O_CREAT | O_EXCL |
O_NOFOLLOW`` relative to the directory's descriptor (opened ``O_DIRECTORY | O_NOFOLLOW``,
owner-only 0700), under names the relay makes and checks: nothing is written through a
symlink or outside the directory.

The directory's path is checked component by component before anything is created: a
``..`` right after a symlink (``<symlink>/..``: the kernel goes to the parent of the
link's *target*, not of the link) is refused, and so is a symlink anywhere in the path
that belongs to another user (root's own, like ``/var/run``, are trusted): either would
let the directory land somewhere the path does not name, which the relay would then make
0700. Symlinks of this user's own and plain ``..`` are fine.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
import stat
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from tornado.ioloop import IOLoop

from relay.clock import Clock, Deadline
from relay.errors import ConfigError
from relay.observability import log

ARTIFACT_LIMIT: Final = 8 * 1024 * 1024
WRITE_TIMEOUT_S: Final = 2.0
MAX_OUTSTANDING: Final = 4
TRUNCATION_MARKER: Final = b"\n[relay: truncated here: LOG_BODIES keeps 8 MiB per artifact]\n"
KINDS: Final = ("client-request.json", "upstream-request.json", "upstream-response",
                "client-response")  # fmt: skip
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")

# (directory fd, file name, bytes, create): writes them all or raises OSError.
WriteFn = Callable[[int, str, bytes, bool], None]


def write_file(dir_fd: int, name: str, data: bytes, create: bool) -> None:
    """Append ``data`` to ``name`` in the directory ``dir_fd``; ``create``: it must not exist."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    if create:
        flags |= os.O_CREAT | os.O_EXCL
    fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def check_name(name: str) -> str:
    """``name`` if it is one plain file name the relay made; ValueError otherwise."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"not a body log file name: {name!r}")
    return name


class BodyLog:
    """The process's body log: the directory, the write pool and the outstanding count."""

    def __init__(
        self,
        dir_fd: int,
        clock: Clock,
        *,
        path: Path | None = None,
        limit: int = ARTIFACT_LIMIT,
        write_timeout_s: float = WRITE_TIMEOUT_S,
        max_outstanding: int = MAX_OUTSTANDING,
        write: WriteFn = write_file,
    ) -> None:
        self.dir_fd = dir_fd
        self.path = path
        self.clock = clock
        self.limit = limit
        self.write_timeout_s = write_timeout_s
        self.max_outstanding = max_outstanding
        self.write = write
        self.outstanding = 0
        self.failures = 0
        self._pool = ThreadPoolExecutor(max_outstanding, thread_name_prefix="body-log")
        self._closed = False
        self._idle_waiters: list[asyncio.Future[None]] = []

    @classmethod
    def open(cls, path: Path, clock: Clock, **options: object) -> BodyLog:
        """Create (0700) or tighten the directory and hold it open; ConfigError if it is a
        symlink, not a directory, another user's, or cannot be made private."""
        where = f"the body log directory {path} (RELAY_LOG_BODIES_DIR)"
        path = checked_path(path, where)
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with suppress(FileExistsError):
                path.mkdir(mode=0o700)
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise ConfigError(
                    f"{where} is a symlink or not a directory; LOG_BODIES writes only into a "
                    "real directory of its own"
                ) from None
            raise ConfigError(f"cannot open {where}: {exc.strerror}") from None
        try:
            _make_private(fd, where)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, clock, path=path, **options)  # type: ignore[arg-type]

    def for_request(self, request_id: str) -> RequestBodies:
        return RequestBodies(self, request_id)

    @property
    def closed(self) -> bool:
        return self._closed

    async def idle(self) -> None:
        """Return once no write is outstanding (on the IOLoop's thread)."""
        if self.outstanding == 0:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._idle_waiters.append(waiter)
        await waiter

    def close(self) -> None:
        """Stop: what writers still buffer is abandoned (best-effort); running writes finish
        on their own, and the directory is closed after the last (its descriptor number
        must not be reused under a write still in flight)."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._close_dir_when_idle()

    def _close_dir_when_idle(self) -> None:
        if self._closed and self.outstanding == 0 and self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    # --- used by the writers -------------------------------------------------------------

    def submit(self, name: str, data: bytes, create: bool) -> Future[None] | None:
        """Start one write now, or ``None`` when ``max_outstanding`` are already running."""
        if self._closed or self.outstanding >= self.max_outstanding:
            return None
        self.outstanding += 1
        try:
            return self._pool.submit(self.write, self.dir_fd, name, data, create)
        except RuntimeError:  # the pool shut down meanwhile
            self.outstanding -= 1
            return None

    def landed(self) -> None:
        """One write has returned (its writer may already have started the next)."""
        self._close_dir_when_idle()
        if self.outstanding == 0:
            waiters, self._idle_waiters = self._idle_waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def stamp(self) -> str:
        return datetime.fromtimestamp(self.clock.wall(), UTC).strftime("%Y%m%dT%H%M%SZ")


class RequestBodies:
    """One request's artifacts; each writer is made on first use."""

    def __init__(self, body_log: BodyLog, request_id: str) -> None:
        self.body_log = body_log
        self.request_id = request_id
        self._prefix = check_name(f"{body_log.stamp()}-{request_id}")  # one for all its files
        self._writers: dict[str, BodyWriter] = {}

    def writer(self, kind: str) -> BodyWriter:
        if kind not in KINDS:
            raise ValueError(f"unknown body log artifact {kind!r}")
        found = self._writers.get(kind)
        if found is None:
            name = check_name(f"{self._prefix}-{kind}")
            found = self._writers[kind] = BodyWriter(self.body_log, name, self.request_id, kind)
        return found

    def write(self, kind: str, data: bytes) -> None:
        self.writer(kind).append(data)


class BodyWriter:
    """One artifact: bytes appended in order, one write in flight at a time.

    :meth:`append` never blocks and never raises; it must be called on the IOLoop's thread.
    """

    def __init__(self, body_log: BodyLog, name: str, request_id: str, kind: str) -> None:
        self._log = body_log
        self.name = name
        self.request_id = request_id
        self.kind = kind
        self.accepted = 0  # body bytes taken (at most the limit)
        self.state = "open"  # open | truncated (full: takes nothing more) | disabled
        self._pending = bytearray()
        self._inflight = False
        self._created = False

    def __call__(self, data: bytes) -> None:
        self.append(data)

    def append(self, data: bytes) -> None:
        if self.state != "open" or not data:
            return
        room = self._log.limit - self.accepted
        if len(data) > room:
            self._pending += data[:room]
            self._pending += TRUNCATION_MARKER
            self.accepted += room
            self.state = "truncated"
        else:
            self._pending += data
            self.accepted += len(data)
        self._start()

    def _start(self) -> None:
        if self._inflight or not self._pending or self.state == "disabled":
            return
        data = bytes(self._pending)
        future = self._log.submit(self.name, data, not self._created)
        if future is None:
            self._disable("closed" if self._log.closed else "busy")
            return
        self._pending.clear()
        self._created = True
        self._inflight = True
        loop = IOLoop.current()
        deadline = Deadline(self._log.clock, self._log.write_timeout_s, self._timed_out)

        def landed(done: Future[None]) -> None:  # on the pool's thread
            with suppress(RuntimeError):  # the IOLoop closed first: nothing left to tell
                loop.add_callback(self._landed, done, deadline)

        future.add_done_callback(landed)

    def _landed(self, done: Future[None], deadline: Deadline) -> None:
        self._log.outstanding -= 1
        deadline.stop()
        self._inflight = False
        try:
            if done.cancelled():
                self._disable("stopped")
            elif done.exception() is not None:
                self._disable(_reason(done.exception()))  # type: ignore[arg-type]
            else:
                self._start()
        finally:
            self._log.landed()

    def _timed_out(self) -> None:
        self._disable("timeout")

    def _disable(self, reason: str) -> None:
        if self.state == "disabled":
            return
        self.state = "disabled"
        self._pending.clear()
        self._log.failures += 1
        log.event(
            "body_log_failed",
            level=logging.WARNING,
            request_id=self.request_id,
            artifact=self.kind,
            reason=reason,
        )


def checked_path(path: Path, where: str) -> Path:
    """``path`` made absolute with its ``..`` taken out, once each is known not to follow a
    symlink and no symlink in it belongs to another user (see the module docstring);
    ConfigError otherwise. Components that do not exist yet are created by the relay."""
    me = os.geteuid()
    kept: list[str] = []
    # Not os.path.abspath: it folds ``..`` lexically, which is the bug; keep them to check.
    absolute = path if path.is_absolute() else Path.cwd() / path
    root, *parts = absolute.parts
    for part in parts:
        current = Path(root, *kept)
        if part == "..":
            if kept and current.is_symlink():
                raise ConfigError(
                    f"{where}: '..' follows the symlink {current}, so it would name the "
                    "parent of the link's target; name the directory without '..' there"
                )
            if kept:
                kept.pop()
            continue
        kept.append(part)
        try:
            info = os.lstat(Path(root, *kept))
        except OSError:
            continue  # not there (yet): the relay creates it, as a real directory
        if stat.S_ISLNK(info.st_mode) and info.st_uid not in (me, 0):
            raise ConfigError(
                f"{where}: {Path(root, *kept)} is a symlink of uid {info.st_uid}, not of "
                "this user: another user could point it anywhere"
            )
    return Path(root, *kept)


def _make_private(fd: int, where: str) -> None:
    found = os.fstat(fd)
    if found.st_uid != os.geteuid():
        raise ConfigError(f"{where} belongs to uid {found.st_uid}, not to this user")
    if stat.S_IMODE(found.st_mode) != 0o700:
        try:
            os.fchmod(fd, 0o700)
        except OSError as exc:
            raise ConfigError(f"cannot make {where} private (0700): {exc.strerror}") from None


def _reason(exc: BaseException) -> str:
    """A failure as a code: an errno name (ENOSPC, EEXIST, ELOOP ...) or the type's name."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return errno.errorcode.get(exc.errno, log.error_type(exc))
    return log.error_type(exc)
