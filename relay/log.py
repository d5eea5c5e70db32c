"""Safe diagnostics: fixed event names and reason codes, never bodies or secrets.

Call :func:`event` with an event name and small scalar fields. Values that look like
credentials or ciphertext must never be passed here; the handlers pass ids, counts,
statuses and reason codes only.
"""

from __future__ import annotations

import logging
import sys

LOGGER = logging.getLogger("relay")


def configure(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Tornado's access log prints full URIs; ours (below) prints only what is safe.
    logging.getLogger("tornado.access").setLevel(logging.WARNING)


def event(name: str, level: int = logging.INFO, **fields: object) -> None:
    if LOGGER.isEnabledFor(level):
        parts = " ".join(f"{key}={_scalar(value)}" for key, value in fields.items())
        LOGGER.log(level, "%s %s", name, parts)


def _scalar(value: object) -> str:
    text = str(value)
    if len(text) > 120:
        text = text[:117] + "..."
    return repr(text) if text == "" or any(c.isspace() for c in text) else text
