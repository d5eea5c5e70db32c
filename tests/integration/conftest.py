"""Fixtures of the loopback integration tests."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakeupstream.fake import FakeUpstream
from relay.clock import SystemClock
from tests.support.cache_stack import CACHE_ON
from tests.support.serve_process import Relay
from tests.support.stack import LoopThread, Stack, running_stack


@pytest.fixture(autouse=True)
def _collect_what_the_test_left() -> Iterator[None]:
    """Collect garbage as each test ends, so that a socket or file it left unclosed is
    reported (as an unraisable ResourceWarning, an error here) by that test, not by
    whichever later test the collector happens to run in. What survives is frozen (moved
    out of the collector's sight), so each collection only looks at one test's objects."""
    yield
    gc.collect()
    gc.freeze()


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    with running_stack(tmp_path / "data") as s:
        yield s


@pytest.fixture
def stack_factory(tmp_path: Path):  # type: ignore[no-untyped-def]
    """For tests that need non-default relay settings: ``with stack_factory(env) as s``."""

    def make(env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
        return running_stack(tmp_path / "data", env)

    return make


@pytest.fixture
def cached(tmp_path: Path) -> Iterator[Stack]:
    """A stack with the replay cache on."""
    with running_stack(tmp_path / "data", CACHE_ON) as stack:
        yield stack


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    """One fake upstream for ``relay serve`` processes: its sealing key outlives every
    relay restart, so a replay that is not refused shows in its continuity probe."""
    loop = LoopThread()
    fake = FakeUpstream(clock=SystemClock(), seed=7)
    loop.run(fake.start("127.0.0.1", 0))
    yield fake
    loop.run(fake.stop())
    loop.close()


@pytest.fixture
def relays() -> Iterator[list[Relay]]:
    """The ``relay serve`` processes a test started (tests.support.serve_process.start),
    each closed as the test ends."""
    started: list[Relay] = []
    yield started
    for relay in started:
        relay.close()
