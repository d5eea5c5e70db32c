"""relay.core.replay_header: why no block was replayed, from the plan alone (the
integration tests in tests/integration/test_replay_header.py see ``replayed=<n>``)."""

from __future__ import annotations

import pytest

from relay.core.planner import Plan, Rejection
from relay.core.receipts import Reason
from relay.core.replay_header import for_plan, none


@pytest.mark.parametrize(("plan", "header"), [
    (Plan(), "none; reason=nothing_to_replay"),
    (Plan(unmatched=2), "none; reason=unmatched"),
    (Plan(rejections=(Rejection(Reason.STALE_GENERATION, 3),
                      Rejection(Reason.MEMORY_PRESSURE, 5))), "none; reason=stale_generation"),
    (Plan(rejections=(Rejection(Reason.MEMORY_PRESSURE, 5),), unmatched=1),
     "none; reason=memory_pressure"),
])  # fmt: skip
def test_why_none(plan: Plan, header: str) -> None:
    assert for_plan(plan) == header


def test_none_names_a_code() -> None:
    assert none("capacity_bypass") == "none; reason=capacity_bypass"
