"""Named crash points: test-only SIGKILLs at moments outside timing cannot reach.

A scenario that must kill the relay *between* two steps of one request (say, after a
SQLite commit and before the terminal frame) cannot do it from outside: no log line or
socket state marks that instant reliably. So the relay calls :func:`crash_point` at such
moments, and a test starts the relay with::

    RELAY_TEST_CRASH_AT=before_terminal_frame        # first hit
    RELAY_TEST_CRASH_AT=after_upstream_headers@3     # third hit
    RELAY_TEST_CRASH_AT=a,b@2                        # several points

Safety properties (tested in tests/unit/settings/test_crashpoints.py):

- Off by default: with the variable unset, :func:`crash_point` is one dict lookup on an
  empty dict.
- Test-only: the variable is read once, at import; nothing reachable through HTTP or the
  configuration file can arm a point in a running process.
- A kill is a real ``SIGKILL`` of this process: no ``finally``, no atexit, no flush of
  Python buffers, exactly like the OOM killer or a power cut at the process level.
"""

from __future__ import annotations

import os
import signal
import threading

from relay.errors import ConfigError

ENV_VAR = "RELAY_TEST_CRASH_AT"

# Every point a request passes, in request order. Add a name here when you add a call, so
# scenarios can iterate over them ("fail at every point") and typos fail loudly.
REQUEST_POINTS: tuple[str, ...] = (
    "before_dispatch_intent",  # the cache has planned; no intent row yet
    "before_upstream_send",  # the intent is committed; nothing sent upstream yet
    "after_upstream_headers",  # mid-stream: the upstream answered
    "before_terminal_frame",  # the observation is committed; the client lacks the end
    "after_terminal_frame",  # the client has the end; the intent is unresolved
    "after_done_frame",  # SSE: [DONE] sent; the intent is unresolved
)
# The points of an offline ``relay cache backup|restore`` (relay.storage.backup), in order.
BACKUP_POINTS: tuple[str, ...] = (
    "backup_blocked",  # DEST.blocked is durable; no copy yet
    "backup_copying",  # after each step of SQLite's backup into the temporary file
    "backup_prepared",  # the copy has its new secret, gap and recovery; not yet fsynced
    "backup_published",  # DEST is linked and durable; DEST.blocked is still there
)
# With the cache off over an existing store (relay.cache.replay_cache): the first request
# the cache would have observed has made the coverage gap durable; nothing is sent yet.
GAP_POINTS: tuple[str, ...] = ("after_coverage_gap",)
# ``relay cache restore --replace`` (relay.storage.backup) before the copy's own points.
REPLACE_POINTS: tuple[str, ...] = (
    "replace_blocked",  # LIVE.blocked (naming where the old store goes) is durable
    "replace_moved_aside",  # the old store is under its kept name; nothing at LIVE
)
KNOWN_POINTS: tuple[str, ...] = REQUEST_POINTS + BACKUP_POINTS + GAP_POINTS + REPLACE_POINTS


class CrashPointSpecError(ConfigError):
    """``RELAY_TEST_CRASH_AT`` names an unknown point or has a bad hit count."""


def parse_spec(raw: str, known: tuple[str, ...] = KNOWN_POINTS) -> dict[str, int]:
    """``"a,b@3"`` → ``{"a": 1, "b": 3}``: point name → the hit that kills."""
    armed: dict[str, int] = {}
    for part in raw.split(","):
        item = part.strip()
        if not item:
            continue
        name, _, count = item.partition("@")
        name = name.strip()
        if name not in known:
            raise CrashPointSpecError(
                f"{ENV_VAR}: unknown crash point {name!r}; known points: {', '.join(known)}"
            )
        hit = 1
        if count:
            if not count.strip().isdigit() or int(count) < 1:
                raise CrashPointSpecError(
                    f"{ENV_VAR}: {item!r}: expected name@N with N a whole number >= 1"
                )
            hit = int(count)
        armed[name] = hit
    return armed


# Read once at import: a running relay cannot be re-armed (the variable is not consulted
# again), and an unset variable leaves an empty dict so the hot path is a single lookup.
_ARMED: dict[str, int] = parse_spec(os.environ.get(ENV_VAR, ""))
_HITS: dict[str, int] = {}
_LOCK = threading.Lock()


def crash_point(name: str) -> None:
    """SIGKILL this process if ``RELAY_TEST_CRASH_AT`` armed ``name`` for this hit."""
    if not _ARMED:
        return
    target = _ARMED.get(name)
    if target is None:
        return
    with _LOCK:
        hits = _HITS.get(name, 0) + 1
        _HITS[name] = hits
    if hits == target:
        # One line on stderr so the harness can tell an armed kill from a real crash; it is
        # written with os.write (unbuffered) because nothing will be flushed after this.
        os.write(2, f"crash_point {name} hit={hits} SIGKILL\n".encode())
        os.kill(os.getpid(), signal.SIGKILL)


def armed_points() -> dict[str, int]:
    """What this process was started with (for diagnostics and tests)."""
    return dict(_ARMED)
