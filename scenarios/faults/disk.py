"""Disk faults through real mechanisms.

- :class:`TmpfsMount`: a size-limited tmpfs mounted over the relay's data directory gives
  real ``ENOSPC`` (root only). :meth:`TmpfsMount.fill` adds a ballast file to fill it at
  run time, :meth:`TmpfsMount.release` frees it. Mounts are registered for cleanup and
  :func:`sweep_stale_mounts` removes any left by a harness that was itself killed.
- :func:`fiu_mod` / :func:`fiu_ctrl`: libfiu's POSIX preload (what ``fiu-run -x`` sets up)
  makes ``write``/``pwrite``/``fsync`` fail with ``EIO`` at a probability or always, and
  ``fiu-ctrl`` switches failure points in the running process.
- :func:`strace_mod`: ``strace --inject`` fails exactly the N-th call of a syscall
  (``when=N``) or every call from N on (``when=N+``): the counted faults the SQLite-style
  countdown needs (:mod:`scenarios.faults.countdown`).
- :func:`limit_pages`: ``PRAGMA max_page_count`` for a cheap ``SQLITE_FULL``.
"""

from __future__ import annotations

import atexit
import contextlib
import errno as errno_mod
import os
import shutil
import sqlite3
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from scenarios.history import History
from scenarios.launch import LaunchMod

FIU_LIB_DIRS = ("/usr/lib/fiu", "/usr/local/lib/fiu", "/usr/lib/x86_64-linux-gnu/fiu")
MOUNT_MARKER = "relay-scenario-"


def temp_prefix() -> str:
    """The prefix of a temp dir that may hold mounts: the marker, then this process's pid,
    so that another run's sweep leaves the mounts of a run still alive alone."""
    return f"{MOUNT_MARKER}{os.getpid()}-"


class DiskFaultUnavailable(RuntimeError):
    """The mechanism cannot run on this machine; the message says what is missing."""


# --- tmpfs (ENOSPC) ------------------------------------------------------------------------


def tmpfs_missing() -> str | None:
    if os.geteuid() != 0:
        return f"size-limited tmpfs mounts need root (the scenario runs as uid {os.geteuid()})"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "mount/umount not found (Debian package 'mount')"
    return None


@dataclass(eq=False)  # identity semantics: live mounts are kept in a set
class TmpfsMount:
    target: Path
    size_bytes: int
    history: History | None = None
    mounted: bool = False
    _ballast: Path | None = None

    def mount(self) -> TmpfsMount:
        reason = tmpfs_missing()
        if reason is not None:
            raise DiskFaultUnavailable(reason)
        if MOUNT_MARKER not in str(self.target):
            # Only ever mount inside a harness temp dir: cleanup sweeps rely on the marker.
            raise ValueError(f"refusing to mount outside a scenario temp dir: {self.target}")
        self.target.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            [
                "mount",
                "-t",
                "tmpfs",
                "-o",
                f"size={self.size_bytes},mode=0700",
                "tmpfs",
                str(self.target),
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        )
        if result.returncode != 0:
            raise DiskFaultUnavailable(f"mount tmpfs failed: {result.stderr.strip()}")
        self.mounted = True
        _MOUNTED.add(self)
        if self.history is not None:
            self.history.record("fault", fault="tmpfs_mount", size_bytes=self.size_bytes)
        return self

    def fill(self, leave_bytes: int = 0) -> int:
        """Write a ballast file until at most ``leave_bytes`` remain free; return its size."""
        self._ballast = self.target / ".scenario-ballast"
        written = 0
        with self._ballast.open("ab") as out:
            while self.free_bytes() > leave_bytes:
                want = min(1 << 16, self.free_bytes() - leave_bytes)
                try:
                    out.write(b"\0" * max(want, 1))
                    out.flush()
                except OSError as exc:
                    if exc.errno != errno_mod.ENOSPC:
                        raise
                    break
                written += max(want, 1)
        if self.history is not None:
            self.history.record("fault", fault="disk_fill", free_bytes=self.free_bytes())
        return written

    def release(self) -> None:
        if self._ballast is not None:
            with contextlib.suppress(FileNotFoundError):
                self._ballast.unlink()
            self._ballast = None
            if self.history is not None:
                self.history.record("fault", fault="disk_release", free_bytes=self.free_bytes())

    def free_bytes(self) -> int:
        stat = os.statvfs(self.target)
        return stat.f_bavail * stat.f_frsize

    def unmount(self) -> None:
        if not self.mounted:
            return
        result = subprocess.run(
            ["umount", str(self.target)], capture_output=True, text=True, check=False, timeout=10
        )
        if result.returncode != 0:
            # Busy (a process still holds a file): detach lazily so nothing is left behind.
            subprocess.run(["umount", "-l", str(self.target)], check=True, timeout=10)
        self.mounted = False
        _MOUNTED.discard(self)


_MOUNTED: set[TmpfsMount] = set()


@atexit.register
def _unmount_all() -> None:
    """Last resort when a harness is interrupted before its finally blocks ran."""
    for mount in list(_MOUNTED):
        with contextlib.suppress(Exception):
            mount.unmount()


def sweep_stale_mounts() -> list[str]:
    """Unmount tmpfs mounts left in scenario temp dirs by an earlier, killed harness (one
    whose process is gone: concurrent runs keep theirs)."""
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        points = [line.split()[1] for line in mounts if len(line.split()) > 2]
    stale = stale_mount_points(points, tempfile.gettempdir())
    for point in stale:
        subprocess.run(["umount", "-l", point], check=False, timeout=10)
    return stale


def stale_mount_points(points: list[str], root: str) -> list[str]:
    """Which of the mount ``points`` are in a scenario temp dir under ``root`` whose run is
    gone, innermost first (the order to unmount them in)."""
    marker = os.path.join(root, MOUNT_MARKER)
    return [
        point
        for point in sorted(points, key=len, reverse=True)
        if point.startswith(marker) and not _owner_alive(point[len(marker) :])
    ]


def _owner_alive(name: str) -> bool:
    """Whether the run whose temp dir is ``name`` (after the marker: ``<pid>-...``) lives."""
    pid = name.split("-", 1)[0]
    if not pid.isdigit():
        return False  # a dir from before the pid was part of the name
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --- libfiu (EIO at run time) ----------------------------------------------------------------


def fiu_lib_dir() -> str | None:
    for directory in FIU_LIB_DIRS:
        if os.path.exists(os.path.join(directory, "fiu_posix_preload.so")):
            return directory
    return None


def fiu_missing() -> str | None:
    if fiu_lib_dir() is None or shutil.which("fiu-ctrl") is None:
        return "libfiu preload libraries or fiu-ctrl not found; install Debian 'fiu-utils'"
    return None


def fiu_mod(ctrl_prefix: Path, enable: tuple[str, ...] = ()) -> LaunchMod:
    """What ``fiu-run -x -f PREFIX -c CMD...`` sets up, as a stackable launch mod.

    ``enable`` holds fiu-run commands, e.g. ``"enable_random name=posix/io/rw/write,
    probability=0.05"`` or ``"enable name=posix/io/sync/fsync,failinfo=5"`` (failinfo is
    the errno: 5 = EIO). The control FIFO lives under ``ctrl_prefix`` (the harness temp
    dir), never in a shared /tmp path.
    """
    directory = fiu_lib_dir()
    if directory is None:
        raise DiskFaultUnavailable(fiu_missing() or "libfiu missing")
    return LaunchMod(
        "libfiu",
        env={
            "FIU_ENABLE": "\n".join(enable) + ("\n" if enable else ""),
            "FIU_CTRL_FIFO": str(ctrl_prefix),
        },
        preload=(f"{directory}/fiu_run_preload.so", f"{directory}/fiu_posix_preload.so"),
    )


def fiu_ctrl(pid: int, command: str, ctrl_prefix: Path, history: History | None = None) -> None:
    """Enable/disable failure points in a running process started under :func:`fiu_mod`."""
    subprocess.run(
        ["fiu-ctrl", "-f", str(ctrl_prefix), "-c", command, str(pid)],
        check=True,
        capture_output=True,
        timeout=10,
    )
    if history is not None:
        history.record("fault", fault="fiu", command=command, pid=pid)


def eio_on_writes(probability: float | None = None) -> tuple[str, ...]:
    """fiu commands: EIO on write/pwrite/fsync/fdatasync, always or at a probability."""
    points = (
        "posix/io/rw/write",
        "posix/io/rw/pwrite",
        "posix/io/sync/fsync",
        "posix/io/sync/fdatasync",
    )
    if probability is None:
        return tuple(f"enable name={point},failinfo={errno_mod.EIO}" for point in points)
    return tuple(
        f"enable_random name={point},probability={probability},failinfo={errno_mod.EIO}"
        for point in points
    )


# --- strace (the N-th call) ------------------------------------------------------------------


def strace_missing() -> str | None:
    if shutil.which("strace") is None:
        return "strace not found; install the Debian package 'strace' for counted I/O faults"
    return None


def strace_mod(
    syscalls: tuple[str, ...], nth: int, *, persistent: bool, err: str = "EIO", log: Path
) -> LaunchMod:
    """Fail the ``nth`` call of each syscall in ``syscalls`` (and every later one if
    ``persistent``). Counting is per syscall and per thread (strace's accounting)."""
    if strace_missing():
        raise DiskFaultUnavailable(strace_missing() or "")
    when = f"{nth}+" if persistent else str(nth)
    names = ",".join(syscalls)
    return LaunchMod(
        f"strace-{names}-{when}",
        argv_prefix=(
            "strace",
            "-f",
            "-qq",
            "-o",
            str(log),
            "-e",
            f"trace={names}",
            "-e",
            f"inject={names}:error={err}:when={when}",
        ),
    )


def injected_count(log: Path) -> int:
    """How many injections strace performed (lines marked ``(INJECTED)``)."""
    try:
        return log.read_text(errors="replace").count("(INJECTED)")
    except FileNotFoundError:
        return 0


# --- SQLite -------------------------------------------------------------------------------------


def limit_pages(conn: sqlite3.Connection, extra_pages: int = 0) -> int:
    """Cap the database at its current size plus ``extra_pages``: the next growth fails
    with SQLITE_FULL. Returns the cap."""
    (count,) = conn.execute("PRAGMA page_count").fetchone()
    cap = int(count) + extra_pages
    conn.execute(f"PRAGMA max_page_count={cap}")
    return cap


def integrity_check(path: Path) -> str:
    """``PRAGMA integrity_check`` on a fresh read-only connection: 'ok' or the problems."""
    return inspect_store(path, count=()).integrity


@dataclass(frozen=True)
class StoreReport:
    integrity: str  # 'ok' or the problems PRAGMA integrity_check found
    rows: dict[str, int]  # row counts of the tables asked for


def inspect_store(path: Path, count: tuple[str, ...] = ("intents",)) -> StoreReport:
    """Open a SQLite file read-only (nobody may hold it: the relay's lock is exclusive),
    run ``PRAGMA integrity_check`` and count the rows of ``count``'s tables.

    A read-only connection to a WAL database whose writer kept its WAL index in memory
    (``locking_mode=EXCLUSIVE``) builds a ``-shm`` file to read the WAL; one this call
    created is removed again, so the check leaves the directory as it found it.
    """
    if not path.exists():
        raise FileNotFoundError(f"no SQLite file at {path}")
    shm = path.with_name(path.name + "-shm")
    had_shm = shm.exists()
    conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=0)
    counts: dict[str, int] = {}
    try:
        rows = conn.execute("PRAGMA integrity_check").fetchall()
        for table in count:
            if not table.isidentifier():
                raise ValueError(f"not a table name: {table!r}")
            counts[table] = int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # noqa: S608
    except sqlite3.DatabaseError as exc:
        code = getattr(exc, "sqlite_errorcode", -1) & 0xFF
        if code not in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
            raise  # locked (someone owns it), missing table ...: not a verdict on the file
        rows = [(f"unreadable: {getattr(exc, 'sqlite_errorname', type(exc).__name__)}",)]
    finally:
        conn.close()
        if not had_shm:
            with contextlib.suppress(FileNotFoundError):
                shm.unlink()
    return StoreReport("\n".join(str(row[0]) for row in rows), counts)
