"""relay.app.heap: the collector's settings ``relay serve`` takes once it is built."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from relay.app import heap


@pytest.fixture
def restored_collector() -> Iterator[None]:
    """The test process's own settings back afterwards: settle() is process-wide."""
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restored_collector")
def test_settle_freezes_what_survived_startup_and_raises_the_young_threshold() -> None:
    survivor = [object()]  # a container alive at the call: frozen, never walked again
    gc.unfreeze()
    before = gc.get_freeze_count()
    heap.settle()
    assert gc.get_freeze_count() > before
    assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, *heap.OLDER_THRESHOLDS)
    # Still tracked, but in no generation a collection walks: the permanent one.
    assert gc.is_tracked(survivor)
    assert not any(o is survivor for o in gc.get_objects())


@pytest.mark.usefixtures("restored_collector")
def test_cycles_made_after_settle_are_still_collected() -> None:
    heap.settle()

    class Node:
        other: object

    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle reference counting alone never frees
    probe = [False]

    class Canary:
        def __del__(self) -> None:
            probe[0] = True

    a.canary = Canary()  # type: ignore[attr-defined]
    del a, b
    gc.collect()
    assert probe[0]
