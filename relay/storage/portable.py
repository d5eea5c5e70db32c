"""What differs between the platforms the relay runs on (Linux and macOS), in one place.

The relay's serving path uses POSIX calls only, with one exception handled here: the disk
reserve must own real blocks (design §6 "Disk pressure"), and ``os.posix_fallocate`` is
Linux's (CPython on macOS has none). :func:`preallocate` tries, in order, the calls a
platform offers and ends with the one that works everywhere:

1. ``os.posix_fallocate`` (Linux, the BSDs);
2. ``fcntl(F_PREALLOCATE)`` with an ``fstore_t``, then ``ftruncate`` (macOS);
3. writing zeros in 1 MiB chunks, then ``fsync``.

A step that is missing or unsupported by the file system falls through to the next; one
that ran is checked (the file must own ``length`` bytes of blocks, as :class:`DiskGuard`
checks a held reserve) and falls through too when it left the file sparse.

Durability differs too: on macOS ``fsync`` returns once the data reaches the drive, whose
write cache can still lose it on power loss; ``fcntl(F_FULLFSYNC)`` flushes that cache.
:func:`full_fsync` is what every durable write of ours calls (the platform's strongest
flush, ``fsync`` elsewhere), and the replay store sets SQLite's ``fullfsync`` and
``checkpoint_fullfsync`` PRAGMAs, which do the same for its commits (no-ops off macOS).

Everything else the serving path calls exists on both (audited; see the report in
``docs/design.md`` §6 "Platforms"): ``O_DIRECTORY``/``O_NOFOLLOW``/``O_CLOEXEC``, directory
``fsync``, ``statvfs`` (``f_bavail * f_frsize``), ``start_new_session`` and ``killpg``;
``SO_PEERCRED`` is used only where it exists (the admin socket's 0600 file in a 0700
directory is the check everywhere).

Test-only: ``RELAY_TEST_FORCE_PORTABLE_FALLBACKS=1`` (read once, at import, here and
nowhere else) skips steps 1 and 2, so a Linux CI run exercises what macOS and any other
platform fall back to (``nox -s tests`` runs the storage unit tests that way).
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import sys
from collections.abc import Callable
from typing import Final

FORCE_FALLBACKS_ENV: Final = "RELAY_TEST_FORCE_PORTABLE_FALLBACKS"
# Read once: nothing reachable through HTTP or the configuration can change it later.
FORCE_FALLBACKS: bool = os.environ.get(FORCE_FALLBACKS_ENV, "") == "1"

ZERO_CHUNK: Final = 1 << 20

# macOS <sys/fcntl.h>; CPython's fcntl module does not export them.
F_PREALLOCATE: Final = int(getattr(fcntl, "F_PREALLOCATE", 42))
F_ALLOCATECONTIG: Final = 0x2
F_ALLOCATEALL: Final = 0x4
F_PEOFPOSMODE: Final = 3
# fstore_t: fst_flags (unsigned int), fst_posmode (int), fst_offset, fst_length (off_t),
# fst_bytesalloc (off_t, out).
FSTORE: Final = struct.Struct("@Iiqqq")

# The errors that mean "this call does not work here", not "the disk is full".
_UNSUPPORTED: Final = frozenset(
    {errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EINVAL, errno.ENOTTY}
)


def full_fsync(fd: int) -> None:
    """Make ``fd``'s data durable with the platform's strongest flush: ``F_FULLFSYNC``
    where ``fcntl`` has it (macOS; a file system that refuses it gets ``fsync``), else
    ``fsync``."""
    full = getattr(fcntl, "F_FULLFSYNC", None)
    if full is not None and not FORCE_FALLBACKS:
        try:
            fcntl.fcntl(fd, full)
        except OSError as exc:
            if exc.errno not in _UNSUPPORTED:
                raise
        else:
            return
    os.fsync(fd)


def has_f_preallocate() -> bool:
    return sys.platform == "darwin" or hasattr(fcntl, "F_PREALLOCATE")


def preallocate(fd: int, length: int) -> str:
    """Give the empty file ``fd`` ``length`` bytes of real blocks and make them durable;
    which way it was done (``"posix_fallocate"``, ``"f_preallocate"`` or ``"zeros"``).
    Raises ``OSError`` (``ENOSPC`` among others) when it cannot be done."""
    steps: list[tuple[str, Callable[[int, int], None]]] = []
    if not FORCE_FALLBACKS:
        if hasattr(os, "posix_fallocate"):
            steps.append(("posix_fallocate", _posix_fallocate))
        if has_f_preallocate():
            steps.append(("f_preallocate", _f_preallocate))
    for name, step in steps:
        try:
            step(fd, length)
        except OSError as exc:
            if exc.errno not in _UNSUPPORTED:
                raise
            continue
        if _allocated(fd) >= length:
            full_fsync(fd)
            return name
    _write_zeros(fd, length)
    return "zeros"


def _posix_fallocate(fd: int, length: int) -> None:
    os.posix_fallocate(fd, 0, length)


def _f_preallocate(fd: int, length: int) -> None:
    """``F_PREALLOCATE`` from the physical end of the file, contiguous if the volume can,
    else anywhere; then ``ftruncate``, since it allocates without changing the size."""
    for flags in (F_ALLOCATECONTIG | F_ALLOCATEALL, F_ALLOCATEALL):
        request = FSTORE.pack(flags, F_PEOFPOSMODE, 0, length, 0)
        try:
            fcntl.fcntl(fd, F_PREALLOCATE, request)
        except OSError:
            if flags == F_ALLOCATEALL:
                raise
            continue  # too fragmented for one extent
        break
    os.ftruncate(fd, length)


def _write_zeros(fd: int, length: int) -> None:
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)  # a step before may have set the size without the blocks
    zeros = bytes(ZERO_CHUNK)
    left = length
    while left > 0:
        written = os.write(fd, zeros[: min(left, ZERO_CHUNK)])
        left -= written
    full_fsync(fd)


def _allocated(fd: int) -> int:
    return os.fstat(fd).st_blocks * 512
