"""Which tests share one pytest-xdist worker (a pytest plugin; the scheduler runs in the
controller).

``--dist loadgroup`` with the ``xdist_group`` mark does nothing under pytest 9.2:
pytest-xdist 3.8 groups tests by renaming them (it sets ``item._nodeid``, which pytest no
longer reads), so every test goes wherever there is room. The scheduler of ``--dist
loadgroup`` is therefore ours: every test is a unit of its own, as with ``load``, except the
modules of :data:`ONE_WORKER_MODULES`, each a unit that one worker runs whole (and first:
the largest units are handed out first).
"""

from __future__ import annotations

from typing import Any, Final

import pytest
from xdist.scheduler import LoadScopeScheduling

# A module fixture too expensive to run once per worker keeps its module on one worker.
ONE_WORKER_MODULES: Final = (
    "tests/integration/test_live_offline.py",  # the offline live run: half a minute
    "tests/integration/test_packaging.py",  # the wheel build
)


def scope_of(nodeid: str) -> str:
    """The unit of work ``nodeid`` belongs to: its module's path, or itself."""
    module = nodeid.split("::", 1)[0]
    return module if module.endswith(ONE_WORKER_MODULES) else nodeid


class SuiteScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist has no types
    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook; absent without it
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> SuiteScheduling | None:
    if config.getvalue("dist") != "loadgroup":
        return None
    return SuiteScheduling(config, log)
