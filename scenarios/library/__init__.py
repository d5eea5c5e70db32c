"""The scenario library: each scenario is a short function ``build(seed) -> Scenario``.

Register one with :func:`scenario`; tests and ``python -m scenarios`` find it in
:data:`REGISTRY`. ``needs`` names the system tools it requires (``faketime``, ``tmpfs``,
``fiu``, ``strace``) so a machine without them skips exactly that scenario and says why;
``slow`` keeps it out of the fast subset (``nox -s tests``).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

from scenarios.dsl import Scenario
from scenarios.seed import Seed

Builder = Callable[[Seed], Scenario]


@dataclass(frozen=True)
class Entry:
    name: str
    build: Builder
    slow: bool
    needs: tuple[str, ...]
    doc: str


REGISTRY: dict[str, Entry] = {}


def scenario(*, slow: bool = False, needs: tuple[str, ...] = ()) -> Callable[[Builder], Builder]:
    def register(build: Builder) -> Builder:
        name = build.__name__
        if name in REGISTRY:
            raise ValueError(f"scenario {name!r} registered twice")
        REGISTRY[name] = Entry(name, build, slow, needs, (build.__doc__ or "").strip())
        return build

    return register


def load_all() -> dict[str, Entry]:
    """Import every module of the library (each registers its scenarios)."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return REGISTRY
