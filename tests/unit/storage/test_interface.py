"""The SQLite store satisfies the store Protocols the cache is typed against.

mypy checks the typed assignments below; the runtime checks catch a member renamed or
dropped on one side (a Protocol's member that the store lacks, or whose parameters differ)
even where a caller is not type-checked."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest

from relay.storage.cleanup import PayloadCleanup
from relay.storage.interface import (
    PayloadReclaimer,
    ReplayStore,
    StoreDiagnostics,
    StrictStore,
)
from relay.storage.replay_store import ReasoningStore
from relay.storage.strict_store import StrictEntries

RELAY = Path(__file__).resolve().parents[3] / "relay"


def protocol_members(protocol: type) -> list[str]:
    """The members a Protocol declares itself (not those of ``Protocol``/``object``)."""
    return sorted(name for name in vars(protocol) if not name.startswith("_"))


def test_typed_assignments(store: ReasoningStore) -> None:
    replay: ReplayStore = store
    diagnostics: StoreDiagnostics = store
    strict: StrictStore = store.strict
    cleanup: PayloadReclaimer = store.cleanup
    assert replay.secret == store.secret
    assert diagnostics.integrity_check() == ["ok"]
    assert strict.get(1) is None
    assert cleanup.eligible(0.0) == 0


@pytest.mark.parametrize(
    ("protocol", "implementation"),
    [
        (ReplayStore, ReasoningStore),
        (StoreDiagnostics, ReasoningStore),
        (StrictStore, StrictEntries),
        (PayloadReclaimer, PayloadCleanup),
    ],
)
def test_every_protocol_member_is_implemented_with_its_parameters(
    protocol: type, implementation: type, store: ReasoningStore
) -> None:
    members = protocol_members(protocol)
    assert len(members) >= 2  # the protocol is read at all
    instances: dict[type, Any] = {
        ReasoningStore: store,
        StrictEntries: store.strict,
        PayloadCleanup: store.cleanup,
    }
    instance = instances[implementation]
    for name in members:
        declared = inspect.getattr_static(protocol, name)
        assert hasattr(instance, name), f"{implementation.__name__} lacks {name}"
        if isinstance(declared, property):
            continue
        wanted = inspect.signature(declared).parameters
        actual = inspect.signature(getattr(instance, name)).parameters
        # The bound method has no self; every declared parameter is accepted by name and kind.
        for param in list(wanted.values())[1:]:
            assert param.name in actual, f"{implementation.__name__}.{name} lacks {param.name}"
            assert actual[param.name].kind == param.kind, f"{name}({param.name})"
            has_default = param.default is not inspect.Parameter.empty
            assert has_default == (actual[param.name].default is not inspect.Parameter.empty)


def test_the_cache_reaches_the_sqlite_class_only_to_open_it() -> None:
    """The cache layer depends on the Protocol: only the opener (disk_safety) names the
    SQLite store."""
    importers = []
    for path in sorted((RELAY / "cache").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "relay.storage.replay_store":
                importers.append(path.name)
    assert importers == ["disk_safety.py"]
