"""The processes a tunnel program left outside its process group (Linux ``/proc``).

The tunnel runs in a session (and process group) of its own, and the relay stops it by
signalling that group. A descendant that calls ``setsid`` (a daemonizing helper) leaves
the group, and once its parent exits it is re-parented to init: the group signal misses
it. Two marks still find it:

* its ancestry, while the chain of parents up to the tunnel is alive (read before the
  tunnel is stopped);
* :data:`MARK_VARIABLE` in its environment: the relay starts the tunnel with a random
  value there, which every descendant inherits unless it clears its environment.

Only processes of this user are considered, and a process found earlier is signalled
only if it still has the start time it had then (a pid the kernel reused is left alone).
Without ``/proc`` (macOS, the BSDs) nothing is found: there only the group is stopped,
and a daemonizing descendant survives the relay (design §19; docs/operating.md, *Tunnel*).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable
from pathlib import Path
from typing import Final, NamedTuple

MARK_VARIABLE: Final = "RELAY_TUNNEL_MARK"
PROC: Final = Path("/proc")


class Process(NamedTuple):
    pid: int
    start: int  # clock ticks after boot: with the pid, one process for good


def _stat(pid: int) -> tuple[int, int] | None:
    """``(ppid, start time)`` of ``pid``, or None if it is gone (or unreadable)."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: fields follow the last ')'.
    fields = text.rsplit(")", 1)[-1].split()
    try:
        return int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _marked(pid: int, mark: bytes) -> bool:
    try:
        return mark in (PROC / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError:
        return False  # gone, or not ours to read


def left_behind(root: int | None, mark: str) -> set[Process]:
    """This user's processes that descend from ``root`` or carry ``mark`` in their
    environment (``MARK_VARIABLE=mark``), ``root`` and this process excluded."""
    if not PROC.is_dir():
        return set()
    me, uid = os.getpid(), os.getuid()
    table: dict[int, tuple[int, int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(PROC):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                if entry.stat().st_uid != uid:
                    continue
            except OSError:
                continue
            found = _stat(pid)
            if found is not None:
                table[pid] = found
    children: dict[int, list[int]] = {}
    for pid, (ppid, _start) in table.items():
        children.setdefault(ppid, []).append(pid)
    chosen: set[int] = set()
    stack = list(children.get(root, ())) if root is not None else []
    while stack:
        pid = stack.pop()
        if pid not in chosen:
            chosen.add(pid)
            stack.extend(children.get(pid, ()))
    wanted = f"{MARK_VARIABLE}={mark}".encode()
    chosen.update(pid for pid in table if pid not in chosen and _marked(pid, wanted))
    chosen.discard(me)
    if root is not None:
        chosen.discard(root)
    return {Process(pid, table[pid][1]) for pid in chosen}


def signal_all(processes: Iterable[Process], sig: signal.Signals) -> int:
    """Send ``sig`` to each process that still is the one found; how many were signalled."""
    sent = 0
    for process in processes:
        now = _stat(process.pid)
        if now is None or now[1] != process.start:
            continue  # gone, or its pid is someone else's now
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(process.pid, sig)
            sent += 1
    return sent
