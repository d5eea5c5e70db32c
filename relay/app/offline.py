"""The offline upstream the relay serves from when no OPENAI_API_KEY is set.

The relay does not import its test double: the fake upstream registers itself as the
``relay.offline_upstream`` entry point (``setup.cfg``), and the command line -- the
composition root -- loads it here. Anything with this shape can stand in.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Protocol

from relay.clock import Clock
from relay.errors import ConfigError

ENTRY_POINT_GROUP = "relay.offline_upstream"


class OfflineUpstream(Protocol):
    """A Responses API on a loopback socket that needs no real credential."""

    base_url: str  # http://127.0.0.1:PORT/v1, once started

    async def start(self, host: str, port: int) -> int: ...
    async def stop(self) -> None: ...


class OfflineUpstreamFactory(Protocol):
    """``secret``: the upstream's sealing key, the same on every start over one data
    directory (:func:`relay.http.auth.load_or_create_secret`), so what it sealed before a
    restart still opens after it."""

    def __call__(self, *, clock: Clock, secret: bytes) -> OfflineUpstream: ...


def load_offline_upstream() -> OfflineUpstreamFactory:
    """The installed offline upstream's factory; ``ConfigError`` when none is installed."""
    found = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda point: point.name)
    if not found:
        raise ConfigError(
            "OPENAI_API_KEY is not set and no offline upstream is installed "
            f"(entry point group {ENTRY_POINT_GROUP!r}); set OPENAI_API_KEY, or reinstall "
            "the project (python3 -m pip install -e .) to get the built-in fake"
        )
    factory: OfflineUpstreamFactory = found[0].load()
    return factory
