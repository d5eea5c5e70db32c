"""Whether the built-in upstream is reachable, for ``/readyz`` -- without spending tokens.

The evidence is the last contact with it: a model exchange's outcome (recorded by the
request shell) or, when there was none for ``FRESH_S``, the answer to ``GET {base}/models``
(free: no generation). Reachable means it answered over HTTP with something other than
an authentication refusal (401/403: the key is wrong) or a server error (5xx): a 400
about one request, or a 404 from a proxy without ``/models``, still shows it is there.
Pure: the probe itself lives with the handler (relay.handlers.ready).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from relay.errors import (
    RelayError,
    UpstreamError,
    UpstreamFailed,
    UpstreamHTTPError,
    UpstreamProtocolError,
    UpstreamTimeout,
)

FRESH_S: Final = 30.0  # older evidence is renewed by a probe (at most one per this period)


@dataclass(frozen=True)
class Contact:
    ok: bool
    detail: str  # "answered", "http_<status>", "timeout", "unreachable"
    at: float  # monotonic


def http_reachable(status: int) -> bool:
    return status not in (401, 403) and status < 500


def exchange_outcome(error: RelayError | None) -> tuple[bool, str] | None:
    """A model exchange's evidence: ``(reachable, detail)``, or ``None`` when it says
    nothing about the upstream (the client left, the relay refused first)."""
    if error is None:
        return True, "answered"
    if isinstance(error, UpstreamHTTPError):
        return http_reachable(error.status), f"http_{error.status}"
    if isinstance(error, UpstreamTimeout):
        return False, "timeout"
    if isinstance(error, UpstreamFailed | UpstreamProtocolError):
        return True, "answered"  # it answered; the generation or its shape failed
    if isinstance(error, UpstreamError):
        return False, "unreachable"
    return None


def probe_outcome(reason: str | None, status: int | None) -> tuple[bool, str]:
    """A ``GET /models`` probe's evidence (``reason``: relay.upstream.models' codes)."""
    if reason is None:
        return True, "answered"
    if status is not None:
        return http_reachable(status), f"http_{status}"
    if reason in ("malformed", "too_large"):
        return True, "answered"
    return False, reason  # unreachable, timeout


class UpstreamHealth:
    def __init__(self) -> None:
        self.last: Contact | None = None

    def record(self, ok: bool, detail: str, now: float) -> None:
        self.last = Contact(ok, detail, now)

    def fresh(self, now: float) -> Contact | None:
        """The last contact, unless older than ``FRESH_S`` (or none)."""
        last = self.last
        return last if last is not None and now - last.at < FRESH_S else None
