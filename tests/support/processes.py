"""Waiting for a process that is not our child to end (pidfd: an event, not a poll)."""

from __future__ import annotations

import os
import select
from pathlib import Path


def running(pid: int) -> bool:
    """Alive and not a zombie (an exited process nobody has reaped yet is not running)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_gone(pid: int, timeout: float) -> bool:
    """``True`` once ``pid`` has exited (within ``timeout`` seconds)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
    return bool(readable) or not running(pid)
