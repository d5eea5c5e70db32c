"""Scenario tests: one seed per run (printed), stale-mount sweep, and a stray check."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from scenarios.faults.disk import sweep_stale_mounts
from scenarios.procs import live_processes, reap_all
from scenarios.seed import Seed, seed_from_env

SEED_KEY = pytest.StashKey[int]()


def pytest_configure(config: pytest.Config) -> None:
    value, _ = seed_from_env()
    config.stash[SEED_KEY] = value
    if os.geteuid() == 0:
        sweep_stale_mounts()  # left by an earlier run that was itself killed


def pytest_report_header(config: pytest.Config) -> str:
    return f"scenario seed: {config.stash[SEED_KEY]} (set RELAY_SCENARIO_SEED to replay)"


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> Seed:
    """A fresh Seed per test from the run seed, so one test's draws do not shift another's."""
    return Seed(request.config.stash[SEED_KEY])


@pytest.fixture(autouse=True)
def _no_strays() -> Iterator[None]:
    yield
    leftover = live_processes()
    reap_all()
    assert not leftover, f"the test left processes running: {[p.pid for p in leftover]}"
