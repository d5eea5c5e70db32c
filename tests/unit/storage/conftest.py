"""Fixtures of the store's unit tests: a real store at a path the test can reopen, on a
clock the test can move."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.clock import ManualClock
from relay.storage.replay_store import ReasoningStore


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "reasoning-cache.sqlite"


@pytest.fixture
def store(db_path: Path, clock: ManualClock) -> Iterator[ReasoningStore]:
    opened = ReasoningStore.open(db_path, clock=clock)
    yield opened
    opened.close()
