"""relay.core.limits: the versioned canonical limits, framed into every scope."""

from __future__ import annotations

import dataclasses

import pytest

from relay.core.limits import CANONICAL_LIMITS, IDENTITY_FORMAT_VERSION, CanonicalLimits
from tests.support.canonical_reference import identity_scope


def test_the_json_form_holds_every_limit_by_name() -> None:
    limits = CanonicalLimits(max_bytes=1, max_messages=2, max_nodes=3, max_depth=4)
    assert limits.as_json() == {"max_bytes": 1, "max_messages": 2, "max_nodes": 3, "max_depth": 4}
    assert set(limits.as_json()) == {f.name for f in dataclasses.fields(CanonicalLimits)}


def test_the_defaults_are_the_documented_bounds() -> None:
    assert CanonicalLimits() == CANONICAL_LIMITS
    assert CANONICAL_LIMITS.as_json() == {
        "max_bytes": 32 * 1024 * 1024, "max_messages": 6_400,
        "max_nodes": 2_000_000, "max_depth": 64,
    }  # fmt: skip


def test_the_limits_and_the_format_version_are_part_of_every_scope() -> None:
    scope = identity_scope()
    assert scope.value["format"] == IDENTITY_FORMAT_VERSION
    assert scope.value["limits"] == CANONICAL_LIMITS.as_json()


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(CanonicalLimits)])
def test_changing_any_limit_changes_the_scope(name: str) -> None:
    changed = identity_scope(**{name: getattr(CANONICAL_LIMITS, name) - 1})
    assert changed.digest != identity_scope().digest


def test_limits_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        CANONICAL_LIMITS.max_bytes = 1  # type: ignore[misc]
