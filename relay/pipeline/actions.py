"""What a pipeline asks its shell to do: plain values, performed in order.

An action whose outcome the pipeline needs (``Begin``, ``Fence``, ``Poison``, ``Dispatch``,
``SendUpstream``, ``CheckRefusal``, ``Commit``, ``Respond``) is the last of its batch: the
shell feeds the outcome back (``began``, ``guarded``, ``dispatched``,
``upstream_done``/``failed``, ``refusal``, ``committed``, ``responded``, ``client_gone``)
and performs the batch that answer returns. So nothing queued after a commit (or after a
fence) can be performed when it fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from relay.core.capture import CaptureResult
from relay.errors import RelayError, UpstreamHTTPError


@dataclass(frozen=True, slots=True)
class Log:
    """One structured log event (safe fields only: ids, counts, codes)."""

    event: str
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Begin:
    """Cache: decide whether this request is cached, and what must be durable before it
    is forwarded (nothing is written yet). Answer: ``began(capture_bytes, guard)``, or
    ``failed(StoreError)``."""


@dataclass(frozen=True, slots=True)
class Fence:
    """Cache: fence the scopes an unobservable generation may extend (with the cache off
    over a store: record the coverage gap), before anything is forwarded. Answer:
    ``guarded()``, or ``failed(StoreError)``: the request is never forwarded unfenced."""


@dataclass(frozen=True, slots=True)
class Poison:
    """Cache: poison the position of a generation that goes unobserved (no session to
    spare), before anything is forwarded. Answer: ``guarded()``, or ``failed(StoreError)``."""


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
class Accepted:
    """Cache: the upstream answered this send with an event (2xx): a replaying request
    was accepted (counted once per send)."""


@dataclass(frozen=True, slots=True)
class CheckRefusal:
    """Cache: is ``error`` the upstream refusing the replayed state? Answer:
    ``refusal(resend, error)`` -- the body to resend without replay, or ``None``, and the
    error to report otherwise."""

    error: UpstreamHTTPError


@dataclass(frozen=True, slots=True)
class Commit:
    """Cache: commit the observation of the generation (the capture's decision, made
    against what the client is sent). Answer: ``committed()``, or ``failed(StoreError)``."""

    result: CaptureResult


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
    """Cache: the generation ended without a delivered answer. ``poison``: its output is
    unknown (no observation was committed), so its position is poisoned."""

    reason: str
    poison: bool = True


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
    Log | Begin | Fence | Poison | Dispatch | SendUpstream | Stop | Accepted | CheckRefusal
    | Commit | Record
    | StartStream | StartDelivery | Queue | Flush | Respond | Resolve | Abort | Fail | Finish
)  # fmt: skip
