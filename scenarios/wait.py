"""Bounded polling: wait for an event with a deadline instead of sleeping a guess.

Every wait in the harness goes through :func:`wait_until`, so a scenario never sleeps
"long enough": it polls the thing it needs (a log line, a process exit, a socket state)
and fails with a message naming that thing when the deadline passes.

The contract: a probe answers *not yet* with exactly ``None`` or ``False`` (so a boolean
condition and an optional lookup both work); anything else is the awaited value and is
returned as it is, falsy ones included (``0``, ``0.0``, ``""``, ``[]``: a count that
reached zero or an empty list that was read is a real answer, not "keep waiting").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """What the scenario waited for did not happen in time."""


def wait_until(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.005,
    max_interval: float = 0.05,
) -> T:
    """Call ``probe`` until it returns anything but ``None`` or ``False`` (identity, not
    truthiness: ``0`` or ``[]`` is an answer); return that.

    The poll interval starts small (most events are milliseconds away on loopback) and
    backs off to ``max_interval`` so a long wait does not burn a core.
    """
    deadline = time.monotonic() + timeout
    delay = interval
    while True:
        value = probe()
        if value is not None and value is not False:  # not truthiness: 0 is an answer
            return value
        now = time.monotonic()
        if now >= deadline:
            raise WaitTimeout(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(min(delay, deadline - now))
        delay = min(delay * 2, max_interval)
