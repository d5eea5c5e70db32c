"""The acceptance checks, in the order a run makes them.

A check is a function of a :class:`~live.context.CheckContext` that returns a
:class:`~live.verdict.Verdict` (or raises :class:`~live.verdict.CheckFailed`); the runner
adds the requests it made, their tokens and the replay accounting. Register one with
:func:`check` in a module listed in :data:`MODULES`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from live.context import CheckContext
from live.verdict import Verdict

CheckFunction = Callable[[CheckContext], Verdict]


@dataclass(frozen=True)
class Check:
    name: str
    title: str
    run: CheckFunction


_REGISTRY: dict[str, Check] = {}

# Cheap and basic first, so a broken setup fails before it spends much.
MODULES = (
    "live.checks.basics",
    "live.checks.replay",
    "live.checks.tools",
    "live.checks.isolation",
    "live.checks.streaming",
    "live.checks.images",
    "live.checks.cursor",
    "live.checks.cursor_agent",
    "live.checks.cache_ab",
    "live.checks.recovery",
    "live.checks.strict",
)


def check(name: str, title: str) -> Callable[[CheckFunction], CheckFunction]:
    def register(function: CheckFunction) -> CheckFunction:
        if name in _REGISTRY:
            raise ValueError(f"two checks are named {name!r}")
        _REGISTRY[name] = Check(name, title, function)
        return function

    return register


def all_checks() -> list[Check]:
    for module in MODULES:
        importlib.import_module(module)
    return list(_REGISTRY.values())
