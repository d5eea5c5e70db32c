"""Playing a cassette back: which recorded interaction answers a request, and the writes
that send its answer again.

vcrpy's own stub for Tornado cannot stream, so a recording is played back by the fake over
a real socket instead (``FakeUpstream(cassette=...)``, ``fakeupstream --cassette PATH``
or ``POST /__fake/cassette``). A request takes the first recorded interaction not yet
played with the same method and path (under ``/v1``) and, unless ``match_body`` is off,
the same body: both compared as JSON after the same scrubbing
(:func:`fakeupstream.cassette_scrub.scrub_value`, idempotent), so a request carrying the
digests a shareable cassette handed out matches the scrubbed recording, and one carrying
real ciphertext matches an unscrubbed one. A request that matches nothing gets a 400
whose message says why (which interaction, and where the bodies differ -- never a value).

The answer goes out as it was recorded: each recorded chunk one flushed write, after its
recorded delay (scaled by ``timing``; 0 sends at once), ending as the recording ended.
The chunks are the frames of :func:`fakeupstream.toxics.plan`, so :class:`Toxics` given
with the cassette (slices, latency, cuts, resets, hangs) apply on top of the recording.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakeupstream.cassette import Cassette, Ended, Interaction, load
from fakeupstream.cassette_scrub import scrub_body, scrub_value
from fakeupstream.toxics import End, EndKind, Op, Pause, Send, Toxics, plan

# How a played answer ends after its last recorded chunk: a client that left (or a
# recording that stopped) saw no end, so the fake sends nothing more either.
END_OF: dict[Ended, EndKind] = {
    "finish": "finish",
    "close": "close",
    "client_gone": "hang",
    "stopped": "hang",
}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class Mismatch:
    """No recorded interaction answers the request; ``message`` says why."""

    message: str


@dataclass
class Playback:
    """A cassette being played: which interactions were played, and how to play one."""

    cassette: Cassette
    source: str = "cassette"
    timing: float = 1.0  # recorded delays are multiplied by this; 0: none
    match_body: bool = True
    toxics: Toxics = field(default_factory=Toxics)
    played: list[bool] = field(init=False)
    _paths: list[str] = field(init=False)
    _bodies: list[Any] = field(init=False)

    def __post_init__(self) -> None:
        if self.timing < 0:
            raise ValueError("the cassette timing factor must be >= 0")
        interactions = self.cassette.interactions
        self.played = [False] * len(interactions)
        self._paths = [self.cassette.served_path(i) for i in interactions]
        self._bodies = [comparable(i.request_body) for i in interactions]

    @classmethod
    def open(cls, path: Path | str, **options: Any) -> Playback:
        return cls(load(Path(path)), source=str(path), **options)

    def rewind(self) -> None:
        self.played = [False] * len(self.played)

    def status(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "interactions": len(self.played),
            "played": sum(self.played),
            "timing": self.timing,
            "match_body": self.match_body,
            "shareable": self.cassette.shareable,
        }

    def take(self, method: str, path: str, body: bytes) -> Interaction | Mismatch:
        """The interaction that answers this request (now marked played), or why none."""
        method = method.upper()
        interactions = self.cassette.interactions
        routed = [
            index
            for index, interaction in enumerate(interactions)
            if interaction.method == method and self._paths[index] == path
        ]
        left = [index for index in routed if not self.played[index]]
        if not routed:
            return Mismatch(
                f"the cassette {self.source} has no recorded {method} {path} "
                f"(it has {self._summary()})"
            )
        if not left:
            return Mismatch(
                f"every recorded {method} {path} of the cassette {self.source} was already "
                f"played ({len(routed)} of {len(routed)}); POST /__fake/reset rewinds it"
            )
        wanted = comparable(body)
        for index in left:
            if not self.match_body or self._bodies[index] == wanted:
                self.played[index] = True
                return interactions[index]
        where = first_difference(self._bodies[left[0]], wanted)
        return Mismatch(
            f"no recorded {method} {path} left in the cassette {self.source} has this body: "
            f"the next one (interaction {left[0]}) differs at {where}"
        )

    def ops(self, interaction: Interaction, rng: random.Random) -> list[Op]:
        return playback_ops(interaction, timing=self.timing, toxics=self.toxics, rng=rng)

    def _summary(self) -> str:
        routes = Counter(
            f"{i.method} {path}"
            for i, path in zip(self.cassette.interactions, self._paths, strict=True)
        )
        return ", ".join(f"{count} x {route}" for route, count in routes.items()) or "nothing"


def comparable(body: bytes) -> Any:
    """What a request body is compared by: its JSON value after scrubbing (key order and
    whitespace do not count), or its scrubbed bytes when it is not JSON."""
    try:
        return ("json", scrub_value(json.loads(body)))
    except (ValueError, RecursionError):
        return ("bytes", scrub_body(body, sse=False))


def first_difference(recorded: Any, got: Any, where: str = "$") -> str:
    """Where two comparable bodies first differ, as a JSON path; never a value."""
    return _difference(recorded, got, where) or where


def _difference(recorded: Any, got: Any, where: str) -> str | None:
    if type(recorded) is not type(got):
        return f"{where} (a {_kind(got)} where the recording has a {_kind(recorded)})"
    if isinstance(recorded, tuple):  # ("json" | "bytes", value)
        if recorded[0] != got[0]:
            return f"{where} (a {got[0]} body where the recording has a {recorded[0]} body)"
        return _difference(recorded[1], got[1], where)
    if isinstance(recorded, dict):
        for key, value in recorded.items():
            inner = f"{where}.{key}" if _NAME.match(key) else f"{where}[{json.dumps(key)}]"
            if key not in got:
                return f"{inner} (missing from the request)"
            found = _difference(value, got[key], inner)
            if found is not None:
                return found
        extra = next((key for key in got if key not in recorded), None)
        if extra is not None:
            inner = f"{where}.{extra}" if _NAME.match(extra) else f"{where}[{json.dumps(extra)}]"
            return f"{inner} (not in the recording)"
        return None
    if isinstance(recorded, list):
        for index, (left, right) in enumerate(zip(recorded, got, strict=False)):
            found = _difference(left, right, f"{where}[{index}]")
            if found is not None:
                return found
        if len(recorded) != len(got):
            return f"{where} ({len(got)} items where the recording has {len(recorded)})"
        return None
    return None if recorded == got else f"{where} (a different value)"


def _kind(value: Any) -> str:
    return type(value).__name__


def playback_ops(
    interaction: Interaction, *, timing: float, toxics: Toxics, rng: random.Random
) -> list[Op]:
    """The writes that send a recorded answer again: :func:`plan` over its chunks, each
    chunk's first write after its recorded delay, ending as the recording ended."""
    frames: list[bytes] = []
    delays: list[float] = []
    carried = 0.0
    for chunk in interaction.chunks:  # an empty chunk is no write: its delay moves on
        carried += chunk.delay_ms * timing / 1000
        if chunk.data:
            frames.append(chunk.data)
            delays.append(carried)
            carried = 0.0
    ops: list[Op] = []
    frame = 0  # the chunk the next write belongs to
    waited = -1  # the last chunk whose delay was taken
    for op in plan(frames, toxics, rng):
        if isinstance(op, Send):
            if waited < frame:
                waited = frame
                if delays[frame] > 0:
                    ops.append(Pause(delays[frame]))
            # Chunks are not events: the handler records the events from the bytes sent.
            ops.append(Send(op.data, None))
            if op.completes is not None:
                frame = op.completes + 1
        elif isinstance(op, End):
            whole = op.kind == "finish" and frame == len(frames)
            ops.append(End(END_OF[interaction.ended]) if whole else op)
        else:
            ops.append(op)
    return ops
