from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.stack import Stack, running_stack


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
