"""Live tests run only with ``--live`` and an OPENAI_API_KEY; they never run by default."""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--live", action="store_true", help="talk to the real OpenAI API")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    if not config.getoption("--live"):
        reason = "live test: pass --live (nox -s live) to talk to the real OpenAI API"
    elif not os.environ.get("OPENAI_API_KEY"):
        reason = "live test: OPENAI_API_KEY is not set"
    if reason is not None:
        for item in items:
            if "live" in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))
