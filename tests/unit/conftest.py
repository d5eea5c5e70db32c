"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.clock import ManualClock
from relay.core.scope import Scope
from relay.storage.replay_store import ReasoningStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ReasoningStore]:
    """A fresh replay store, a real SQLite file at ``tmp_path/data/cache.sqlite``."""
    with ReasoningStore.open(tmp_path / "data" / "cache.sqlite", clock=ManualClock()) as opened:
        yield opened


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Records whether history_digests started hashing (scopes are built before)."""
    started: list[bool] = []
    original = Scope.history_start

    def recording(self: Scope, *, exclude_reasoning_content: bool = False) -> Any:
        started.append(True)
        return original(self, exclude_reasoning_content=exclude_reasoning_content)

    monkeypatch.setattr(Scope, "history_start", recording)
    return started
