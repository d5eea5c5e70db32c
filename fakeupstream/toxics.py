"""Network faults, toxiproxy style, planned without I/O.

:func:`plan` turns the frames of a body (one per SSE event; a JSON body is one frame) and
a :class:`Toxics` into a list of operations; the server only carries them out:

- :class:`Send` write these bytes and flush them (one read's worth for the client),
- :class:`Pause` wait (latency; from frame ``latency_after_events`` on, so a script can
  answer its first token at once and then stream at a model's pace),
- :class:`End` how the body ends: ``finish`` (proper end of the HTTP body), ``close``
  (FIN without ending the chunked body), ``reset`` (RST), ``hang`` (send nothing more and
  keep the connection open until the client leaves or the fake stops).

Frame edits (malformed, oversized, missing final blank line) happen here too, so every
byte the client will see is decided in one place.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Literal

EndKind = Literal["finish", "close", "reset", "hang"]


@dataclass(frozen=True)
class Toxics:
    latency_ms: float = 0.0  # before each frame
    latency_after_events: int = 0  # the first N frames go out without it (a paced stream)
    slice_bytes: int | None = None  # write in pieces of this size, each flushed
    slice_random: bool = False  # pieces of random size 1..slice_bytes (64 if unset), seeded
    cut_after_events: int | None = None  # end the body after N frames, no terminal event
    cut_after_bytes: int | None = None  # end the body after N body bytes
    cut_mode: Literal["finish", "close"] = "finish"  # how a cut ends the body
    reset_after_events: int | None = None  # RST after N frames
    hang_after_events: int | None = None  # go silent after N frames
    malformed_at_event: int | None = None  # replace frame N's JSON with a broken one
    oversized_event_bytes: int | None = None  # pad one frame's data to this many bytes
    oversized_at_event: int = 2  # which frame gets padded
    omit_final_blank_line: bool = False  # end right after the last data line


@dataclass(frozen=True)
class Send:
    data: bytes
    completes: int | None  # index of the frame this piece finishes, if any


@dataclass(frozen=True)
class Pause:
    seconds: float


@dataclass(frozen=True)
class End:
    kind: EndKind


Op = Send | Pause | End


def plan(frames: list[bytes], toxics: Toxics, rng: random.Random) -> list[Op]:
    """The writes that deliver ``frames`` under ``toxics``; the last op is always an End."""
    frames = edit_frames(frames, toxics)
    stop_at, end = _stop(len(frames), toxics)
    ops: list[Op] = []
    budget = toxics.cut_after_bytes
    for index, frame in enumerate(frames[:stop_at]):
        if toxics.latency_ms > 0 and index >= toxics.latency_after_events:
            ops.append(Pause(toxics.latency_ms / 1000))
        if budget is not None and len(frame) >= budget:
            whole = len(frame) == budget
            ops.extend(_slices(frame[:budget], toxics, rng, completes=index if whole else None))
            return [*ops, End(toxics.cut_mode)]
        ops.extend(_slices(frame, toxics, rng, completes=index))
        if budget is not None:
            budget -= len(frame)
    return [*ops, End(end)]


def edit_frames(frames: list[bytes], toxics: Toxics) -> list[bytes]:
    frames = list(frames)
    if toxics.malformed_at_event is not None and toxics.malformed_at_event < len(frames):
        frames[toxics.malformed_at_event] = malformed(frames[toxics.malformed_at_event])
    index = toxics.oversized_at_event
    if toxics.oversized_event_bytes is not None and index < len(frames):
        frames[index] = oversized(frames[index], toxics.oversized_event_bytes)
    if toxics.omit_final_blank_line and frames and frames[-1].endswith(b"\n\n"):
        frames[-1] = frames[-1][:-1]
    return frames


def _stop(count: int, toxics: Toxics) -> tuple[int, EndKind]:
    """How many frames go out, and how the body then ends (the earliest fault wins)."""
    candidates: list[tuple[int, EndKind]] = [(count, "finish")]
    if toxics.cut_after_events is not None:
        candidates.append((toxics.cut_after_events, toxics.cut_mode))
    if toxics.reset_after_events is not None:
        candidates.append((toxics.reset_after_events, "reset"))
    if toxics.hang_after_events is not None:
        candidates.append((toxics.hang_after_events, "hang"))
    # Earliest first; on a tie a fault beats the plain finish.
    stop_at, end = min(candidates, key=lambda c: (c[0], c[1] == "finish"))
    return min(stop_at, count), end


def _slices(frame: bytes, toxics: Toxics, rng: random.Random, *, completes: int | None) -> list[Op]:
    if not frame:
        return []
    if toxics.slice_bytes is None and not toxics.slice_random:
        return [Send(frame, completes)]
    largest = toxics.slice_bytes or 64
    pieces: list[Op] = []
    start = 0
    while start < len(frame):
        size = rng.randint(1, largest) if toxics.slice_random else largest
        end = min(start + size, len(frame))
        pieces.append(Send(frame[start:end], completes if end == len(frame) else None))
        start = end
    return pieces


def malformed(frame: bytes) -> bytes:
    """The frame with its data cut mid-JSON: still framed as an event, no longer parseable."""
    head, sep, data = frame.partition(b"data: ")
    if not sep:
        return b'data: {"type":\n\n'
    payload = data.rstrip(b"\n")
    return head + sep + payload[: max(1, len(payload) // 2)] + b"\n\n"


def oversized(frame: bytes, size: int) -> bytes:
    """The frame with its JSON padded by whitespace so the data line is ``size`` bytes."""
    head, sep, data = frame.partition(b"data: ")
    payload = data.rstrip(b"\n")
    tail = data[len(payload) :]
    try:
        json.loads(payload)
    except ValueError:
        return frame  # never turn a broken frame into a different broken frame
    if not payload.endswith(b"}") or len(payload) >= size:
        return frame
    padded = payload[:-1] + b" " * (size - len(payload)) + b"}"
    return head + sep + padded + tail
