"""Fixtures shared by the unit tests."""

from __future__ import annotations

from typing import Any

import pytest

from relay.core.identity import Scope


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
