"""What a scenario needs from the machine, and exactly what is missing when it cannot run.

The nox sessions install ``faketime``, ``fiu-utils`` (and use ``mount``) when they run as
root; elsewhere a scenario needing a missing tool is skipped with the message from here,
and nothing else is affected.
"""

from __future__ import annotations

import re
from pathlib import Path

from relay.settings.crashpoints import KNOWN_POINTS
from scenarios.faults.clock import missing as faketime_missing
from scenarios.faults.disk import fiu_missing, strace_missing, tmpfs_missing

ROOT = Path(__file__).resolve().parent.parent


def crash_points_missing(points: tuple[str, ...] = KNOWN_POINTS) -> str | None:
    """The relay must actually reach the named crash points: a ``crash_point("name")``
    call, or a pipeline action that names it (``crash_point="name"``)."""
    source = "\n".join(
        path.read_text(encoding="utf-8", errors="replace")
        for path in (ROOT / "relay").rglob("*.py")
        if path.name != "crashpoints.py"
    )
    absent = [
        p for p in points if not re.search(rf"crash_point(\(\s*|\s*=\s*)['\"]{p}['\"]", source)
    ]
    if absent:
        return f"the relay does not call crash_point() for {', '.join(absent)} yet"
    return None


CHECKS = {
    "faketime": faketime_missing,
    "tmpfs": tmpfs_missing,
    "fiu": fiu_missing,
    "strace": strace_missing,
    "crash_points": crash_points_missing,
}


def missing(needs: tuple[str, ...]) -> str | None:
    """None when every need is met, else one line naming what is missing."""
    reasons = [reason for need in needs if (reason := CHECKS[need]()) is not None]
    return "; ".join(reasons) if reasons else None
