"""``relay status``'s colour decision (relay.ops.commands), on a real pty and a real pipe."""

from __future__ import annotations

import os
import pty

import pytest

from relay.ops.commands import wants_colour


def test_colour_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    leader, follower = pty.openpty()
    read_end, write_end = os.pipe()
    with os.fdopen(follower, "w") as terminal, os.fdopen(write_end, "w") as pipe:
        assert wants_colour(terminal) is True
        assert wants_colour(pipe) is False
        monkeypatch.setenv("NO_COLOR", "1")
        assert wants_colour(terminal) is False
    os.close(leader)
    os.close(read_end)
