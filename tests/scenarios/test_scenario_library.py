"""Every scenario of scenarios/library against real relay and fake-upstream processes.

A failure prints the transcript with the failing step, the seed and a one-line replay
command for exactly this test.
"""

from __future__ import annotations

import pytest

from scenarios.library import REGISTRY, load_all
from scenarios.play import play
from scenarios.requirements import missing
from scenarios.seed import Seed

load_all()

# Scenarios that currently expose a relay bug: strict xfail, so the fix turns them green
# loudly (XPASS fails the run) and the entry must then be removed.
KNOWN_RELAY_BUGS: dict[str, str] = {}


def _params() -> list[object]:
    params: list[object] = []
    for name, entry in sorted(REGISTRY.items()):
        marks: list[pytest.MarkDecorator] = [pytest.mark.scenario]
        if entry.slow:
            marks.append(pytest.mark.slow)
        if name in KNOWN_RELAY_BUGS:
            marks.append(pytest.mark.xfail(reason=KNOWN_RELAY_BUGS[name], strict=True))
        params.append(pytest.param(name, marks=marks, id=name))
    return params


@pytest.mark.parametrize("name", _params())
def test_scenario(name: str, seed: Seed, request: pytest.FixtureRequest) -> None:
    entry = REGISTRY[name]
    reason = missing(entry.needs)
    if reason is not None:
        pytest.skip(reason)
    known_bug = name in KNOWN_RELAY_BUGS  # its expected failure need not keep a run dir
    result = play(
        entry.build(seed), seed, target=request.node.nodeid, keep_on_failure=not known_bug
    )
    assert result.report.ok
    assert result.report.stats["wrong_replays"] == 0
    assert result.report.stats["wrong_restores"] == 0  # strict Chat providers
