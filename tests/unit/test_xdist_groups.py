"""The suite's pytest-xdist scheduling (tests/support/xdist_groups.py): which tests one
worker runs together."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.xdist_groups import ONE_WORKER_MODULES, scope_of

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("nodeid", "scope"),
    [
        ("tests/integration/test_live_offline.py::test_every_check_passes_offline",
         "tests/integration/test_live_offline.py"),
        ("tests/integration/test_packaging.py::test_the_wheel_holds_the_relay_and_its_offline_upstream_only",
         "tests/integration/test_packaging.py"),
        ("tests/integration/test_fuzz.py::test_the_relay_survives_adversarial_input",
         "tests/integration/test_fuzz.py::test_the_relay_survives_adversarial_input"),
        ("tests/unit/test_clock.py::test_a_wall_jump_leaves_monotonic_time_alone[3600.0]",
         "tests/unit/test_clock.py::test_a_wall_jump_leaves_monotonic_time_alone[3600.0]"),
        # a parameter that looks like a grouped module is still one test of its own
        ("tests/unit/test_x.py::test_y[tests/integration/test_packaging.py]",
         "tests/unit/test_x.py::test_y[tests/integration/test_packaging.py]"),
    ],
)  # fmt: skip
def test_grouped_modules_are_one_unit_and_every_other_test_its_own(nodeid: str, scope: str) -> None:
    assert scope_of(nodeid) == scope


def test_every_grouped_module_exists() -> None:
    """A renamed module would silently lose its grouping (its fixture then runs per worker)."""
    assert all((ROOT / module).is_file() for module in ONE_WORKER_MODULES)
