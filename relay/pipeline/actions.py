"""What a pipeline asks its shell to do: plain values, performed in order.

An action whose outcome the pipeline needs (``Dispatch``, ``SendUpstream``,
``CheckRefusal``, ``Commit``, ``Respond``) is the last of its batch: the shell feeds the
outcome back (``dispatched``, ``upstream_done``/``failed``, ``refusal``, ``committed``,
``responded``, ``client_gone``) and performs the batch that answer returns. So nothing
queued after a commit can be performed when the commit fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from relay.core.capture import ClientProjection
from relay.core.responses_events import ResponsesEvent
from relay.errors import RelayError, UpstreamHTTPError


@dataclass(frozen=True, slots=True)
class Log:
    """One structured log event (safe fields only: ids, counts, codes)."""

    event: str
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Cache: plan the replay and commit the dispatch intent, right before sending.
    Answer: ``dispatched(body)`` with the upstream body, or ``failed(StoreError)``."""


@dataclass(frozen=True, slots=True)
class SendUpstream:
    """Post ``body`` upstream; feed each event to ``upstream_event`` (performing what it
    returns before the next event is read). Answer: ``upstream_done()``, ``failed(err)``
    or ``client_gone(frames)``."""

    body: dict[str, Any]
    buffered: bool  # nothing is streamed to the client while it runs (a JSON answer)


@dataclass(frozen=True, slots=True)
class Stop:
    """End the running upstream exchange with ``error`` (raised inside it, so nothing
    more is read); the pipeline's next input is ``failed(error)``."""

    error: RelayError


@dataclass(frozen=True, slots=True)
class Capture:
    """Cache: feed one decoded upstream event to the capture."""

    event: ResponsesEvent


@dataclass(frozen=True, slots=True)
class CheckRefusal:
    """Cache: is ``error`` the upstream refusing the replayed state? Answer:
    ``refusal(resend, error)`` -- the body to resend without replay, or ``None``, and the
    error to report otherwise."""

    error: UpstreamHTTPError


@dataclass(frozen=True, slots=True)
class Commit:
    """Cache: commit the observation of the generation as the client is sent it.
    Answer: ``committed()``, or ``failed(StoreError)``."""

    sent: ClientProjection


@dataclass(frozen=True, slots=True)
class Record:
    """Strict cache: record the answer's reasoning, before the client can see its end.
    Best effort: a failure is logged by the cache and never fails the request."""


@dataclass(frozen=True, slots=True)
class StartStream:
    """Make the answer an event stream (its headers leave with the first flush)."""


@dataclass(frozen=True, slots=True)
class StartDelivery:
    """The generation is complete: what is left must reach the client within the
    delivery deadline."""


@dataclass(frozen=True, slots=True)
class Queue:
    """Buffer one frame for the client. ``crash_point``: the test crash point hit just
    before (relay.settings.crashpoints)."""

    frame: bytes
    crash_point: str | None = None


@dataclass(frozen=True, slots=True)
class Flush:
    """Send the queued frames and wait until the client took them (answer on failure:
    ``client_gone``). ``crash_point``: hit once they were taken."""

    crash_point: str | None = None


@dataclass(frozen=True, slots=True)
class Respond:
    """Send one whole JSON answer within the delivery deadline (the test crash points
    ``before_terminal_frame``/``after_terminal_frame`` around it). Answer:
    ``responded()`` or ``client_gone(0)``."""

    answer: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Resolve:
    """Cache: the client has the whole answer; resolve the dispatch intent."""


@dataclass(frozen=True, slots=True)
class Abort:
    """Cache: the generation ended without a delivered answer (its position is poisoned
    unless its observation was committed)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Fail:
    """End the request with ``error``: its status and envelope when nothing has reached
    the client yet; when the answer has begun (its headers are on the wire: a flushed
    frame or a keepalive), ``frame`` in the stream instead, then the end (logged as
    ``stream_failed``)."""

    error: RelayError
    frame: bytes | None = None


@dataclass(frozen=True, slots=True)
class Finish:
    """End the response."""


Action = (
    Log | Dispatch | SendUpstream | Stop | Capture | CheckRefusal | Commit | Record
    | StartStream | StartDelivery | Queue | Flush | Respond | Resolve | Abort | Fail | Finish
)  # fmt: skip
