"""RELAY_EVENT_LOOP: which loop ``relay serve`` runs on (relay.app.event_loop)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from relay.app.event_loop import loop_factory


def _run_on(choice: str) -> str:
    """The name of the loop a Runner built from ``choice`` runs a coroutine on."""

    async def name() -> str:
        module = type(asyncio.get_running_loop()).__module__
        return "uvloop" if module.startswith("uvloop") else "asyncio"

    with asyncio.Runner(loop_factory=loop_factory(choice)) as runner:
        return runner.run(name())


def test_asyncio_is_asyncio() -> None:
    assert loop_factory("asyncio") is None
    assert _run_on("asyncio") == "asyncio"


def test_auto_and_uvloop_run_on_uvloop_when_installed() -> None:
    pytest.importorskip("uvloop")
    assert _run_on("auto") == "uvloop"
    assert _run_on("uvloop") == "uvloop"


def test_auto_without_uvloop_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop -> ImportError
    assert loop_factory("auto") is None
    assert _run_on("auto") == "asyncio"
    with pytest.raises(ImportError):
        loop_factory("uvloop")
