"""relay.upstream.health: what a model exchange or a ``GET /models`` probe says about the
upstream's reachability (table-driven), and how long that evidence counts."""

from __future__ import annotations

import pytest

from relay.errors import (
    InvalidRequest,
    RelayError,
    UpstreamError,
    UpstreamFailed,
    UpstreamHTTPError,
    UpstreamProtocolError,
    UpstreamTimeout,
)
from relay.upstream.health import FRESH_S, UpstreamHealth, exchange_outcome, probe_outcome


def http(status: int) -> UpstreamHTTPError:
    return UpstreamHTTPError(status, {"error": {"message": "m", "type": "t"}})


@pytest.mark.parametrize(("error", "outcome"), [
    (None, (True, "answered")),
    (http(400), (True, "http_400")),
    (http(429), (True, "http_429")),
    (http(401), (False, "http_401")),
    (http(403), (False, "http_403")),
    (http(500), (False, "http_500")),
    (http(503), (False, "http_503")),
    (UpstreamTimeout("slow"), (False, "timeout")),
    (UpstreamError("refused"), (False, "unreachable")),
    (UpstreamFailed("response.failed"), (True, "answered")),
    (UpstreamProtocolError("no final event"), (True, "answered")),
    (InvalidRequest("the client's fault"), None),
])  # fmt: skip
def test_an_exchange(error: RelayError | None, outcome: tuple[bool, str] | None) -> None:
    assert exchange_outcome(error) == outcome


@pytest.mark.parametrize(("reason", "status", "outcome"), [
    (None, None, (True, "answered")),
    ("http_status", 404, (True, "http_404")),  # a proxy without /models is still there
    ("http_status", 401, (False, "http_401")),
    ("http_status", 502, (False, "http_502")),
    ("malformed", 200, (True, "http_200")),
    ("malformed", None, (True, "answered")),
    ("too_large", None, (True, "answered")),
    ("unreachable", None, (False, "unreachable")),
    ("timeout", None, (False, "timeout")),
])  # fmt: skip
def test_a_probe(reason: str | None, status: int | None, outcome: tuple[bool, str]) -> None:
    assert probe_outcome(reason, status) == outcome


def test_evidence_counts_for_fresh_s() -> None:
    health = UpstreamHealth()
    assert health.fresh(0.0) is None
    health.record(True, "answered", 100.0)
    assert health.fresh(100.0 + FRESH_S - 0.001) is health.last
    assert health.fresh(100.0 + FRESH_S) is None
    assert health.last is not None and health.last.ok
