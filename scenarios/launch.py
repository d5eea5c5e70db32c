"""How a fault changes the way the relay is launched: env, preload libraries, argv prefix.

libfaketime and libfiu both work by ``LD_PRELOAD``; their wrapper scripts (``faketime``,
``fiu-run``) each *overwrite* ``LD_PRELOAD``, so they cannot be stacked. Fault modules
therefore return a :class:`LaunchMod` and the runner merges them: one ``LD_PRELOAD`` with
every library, the union of the variables, and argv prefixes (strace) outermost first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LaunchMod:
    name: str
    env: Mapping[str, str] = field(default_factory=dict)
    preload: tuple[str, ...] = ()
    argv_prefix: tuple[str, ...] = ()


def apply(
    mods: Iterable[LaunchMod], argv: list[str], env: dict[str, str]
) -> tuple[list[str], dict[str, str]]:
    """The argv and environment for a child launched under all ``mods``."""
    merged = dict(env)
    owner: dict[str, str] = {}
    preload: list[str] = []
    prefix: list[str] = []
    for mod in mods:
        # Two faults setting the same variable differently would silently disable one.
        for key, value in mod.env.items():
            if key in owner and merged[key] != value:
                raise ValueError(f"launch mods {owner[key]!r} and {mod.name!r} both set {key}")
            owner[key] = mod.name
        merged.update(mod.env)
        preload.extend(mod.preload)
        prefix.extend(mod.argv_prefix)
    if preload:
        merged["LD_PRELOAD"] = " ".join(preload)
    return [*prefix, *argv], merged
