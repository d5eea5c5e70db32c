"""The SQLite store behind a cache, for tests that look under the store Protocol (its
file, its connection)."""

from __future__ import annotations

from relay.storage.interface import ReplayStore
from relay.storage.replay_store import ReasoningStore


def sqlite_store(store: ReplayStore | None) -> ReasoningStore:
    """``store`` as the SQLite store it is in these tests (fails on any other or none)."""
    assert isinstance(store, ReasoningStore), f"not a SQLite store: {type(store).__name__}"
    return store
