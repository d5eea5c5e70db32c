"""The event loop ``relay serve`` runs on (RELAY_EVENT_LOOP; design §21).

``auto`` (the default): uvloop's loop when uvloop is installed (the ``fast`` extra), else
asyncio's own; ``asyncio`` and ``uvloop`` choose one (``load_config`` refuses ``uvloop``
when it is not installed). Tornado runs on whichever asyncio loop is current, so nothing
else changes: the relay's clock, timers and executor go through the loop's public API.
Why uvloop: its socket reads and writes, timers and callbacks are C, and the bench
measured less time to the first token with it (design §21).
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory of the loop ``choice`` names (``None``: asyncio's default loop)."""
    if choice == "asyncio":
        return None
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        if choice == "uvloop":  # load_config checked it: only a broken install gets here
            raise
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory
