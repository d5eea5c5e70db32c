"""An :class:`Answer` (status, frames, headers) and the builders of error and raw SSE answers."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fakeupstream.rules import ApiError
from fakeupstream.scripts import HttpError


@dataclass(frozen=True)
class Answer:
    status: int
    frames: list[bytes]  # one per SSE event; a JSON body is one frame
    parsed: list[Any]  # what each frame carries, for the record
    stream: bool = False
    headers: tuple[tuple[str, str], ...] = ()


def error_answer(error: ApiError, headers: tuple[tuple[str, str], ...] = ()) -> Answer:
    # OpenAI indents error envelopes by four spaces (Response bodies by two).
    envelope = error.envelope()
    data = json.dumps(envelope, indent=4, ensure_ascii=False).encode()
    return Answer(error.status, [data], [envelope], headers=headers)


def scripted_error(error: HttpError) -> Answer:
    failure = ApiError(
        error.status, error.message, type=error.type, param=error.param, code=error.code
    )
    return error_answer(failure, error.headers)


def raw_answer(raw: bytes) -> Answer:
    """Recorded SSE bytes, framed per event so event-counting toxics still apply."""
    frames = []
    rest = raw
    while rest:
        head, sep, rest = rest.partition(b"\n\n")
        frames.append(head + sep)
    parsed: list[Any] = []
    for frame in frames:
        data = b"\n".join(
            line[5:].lstrip(b" ") for line in frame.split(b"\n") if line.startswith(b"data:")
        )
        try:
            parsed.append(json.loads(data))
        except ValueError:
            parsed.append(frame.decode("utf-8", "replace"))
    return Answer(200, frames, parsed, stream=True)
