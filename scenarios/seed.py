"""One seed drives every random choice of a scenario run (FoundationDB style).

Choices are drawn from *named sub-streams* (``seed.stream("chunks")``), each derived from
the run seed and its name. Adding a new random choice in one place therefore does not
shift the values every other place draws, so an old seed keeps reproducing the same kill
points and clock jumps after the harness grows.

A failing run prints its seed and a one-line replay command (:func:`replay_command`).
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import secrets
import shlex
from dataclasses import dataclass, field

ENV_VAR = "RELAY_SCENARIO_SEED"


def seed_from_env(environ: dict[str, str] | None = None) -> tuple[int, bool]:
    """The run seed and whether it came from the environment (else freshly drawn)."""
    env = os.environ if environ is None else environ
    raw = env.get(ENV_VAR, "").strip()
    if raw:
        try:
            return int(raw, 0), True
        except ValueError:
            raise ValueError(f"{ENV_VAR}={raw!r}: expected an integer seed") from None
    return secrets.randbelow(2**32), False


def replay_command(seed: int, target: str) -> str:
    """One shell line that re-runs ``target`` (a pytest node id or scenario name)."""
    if "::" in target or target.endswith(".py"):
        return f"{ENV_VAR}={seed} python -m pytest {shlex.quote(target)}"
    return f"{ENV_VAR}={seed} python -m scenarios run {shlex.quote(target)}"


@dataclass
class Seed:
    value: int
    _streams: dict[str, random.Random] = field(default_factory=dict, repr=False)

    def stream(self, name: str) -> random.Random:
        """An independent generator for one kind of choice, stable across harness changes."""
        rng = self._streams.get(name)
        if rng is None:
            digest = hashlib.sha256(f"{self.value}:{name}".encode()).digest()
            rng = random.Random(int.from_bytes(digest[:8], "big"))
            self._streams[name] = rng
        return rng

    def randint(self, name: str, low: int, high: int) -> int:
        return self.stream(name).randint(low, high)

    def choice(self, name: str, options: list[str]) -> str:
        return self.stream(name).choice(options)

    def chunk_sizes(self, name: str, total: int, low: int = 1, high: int = 64) -> list[int]:
        """Split ``total`` bytes into seeded pieces (for slicers and slow readers)."""
        rng = self.stream(name)
        sizes: list[int] = []
        while total > 0:
            size = min(total, rng.randint(low, high))
            sizes.append(size)
            total -= size
        return sizes

    def clock_jump(self, name: str, low_s: float = 0.001, high_s: float = 86_400.0) -> float:
        """A signed wall-clock jump, magnitude log-uniform in [low_s, high_s] (Jepsen's bumps).

        Drawing the exponent uniformly gives as many millisecond nudges as multi-day
        leaps, which is what finds both off-by-a-tick and "the clock went back a day" bugs.
        """
        rng = self.stream(name)
        magnitude = math.exp(rng.uniform(math.log(low_s), math.log(high_s)))
        return magnitude if rng.random() < 0.5 else -magnitude
