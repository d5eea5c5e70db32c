"""The relay's own counters and histograms, in a registry of its own.

A :class:`RelayMetrics` belongs to one relay (``Runtime.metrics``, injected by the server):
tests run several relays in one process, so nothing goes to prometheus_client's global
registry. The request shell
feeds it (relay.handlers.base/shell); what the caches already count is read when the
registry is collected (relay.ops.collector). Labels are bounded: routes from
relay.http.routes' table, outcomes from :func:`relay.ops.window.bounded_code`, configured
provider names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from relay.http.routes import label_of
from relay.ops.window import CounterHistory, ErrorTally
from relay.translate.parameters import NEUTRAL_ONLY
from relay.translate.responses_input import REFUSED

if TYPE_CHECKING:
    from relay.app.runtime import Runtime

# From a local fake's milliseconds to a slow model's first token.
LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
# Parameters whose refusal is counted by name (a fixed list: a client names any other key).
REFUSABLE_PARAMS: Final = frozenset(REFUSED) | frozenset(NEUTRAL_ONLY)
OK: Final = "ok"
CLIENT_GONE: Final = "client_gone"


def route_of(path: str) -> str:
    """The route label of a path (relay.http.routes' table; anything else is "other")."""
    return label_of(path)


def relay_metrics(runtime: Runtime) -> RelayMetrics:
    """The runtime's metrics as operations made them (the server injects a
    :class:`RelayMetrics`; the runtime knows them only as what the shell records)."""
    metrics = runtime.metrics
    assert isinstance(metrics, RelayMetrics)
    return metrics


class RelayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "relay_requests",
            "HTTP requests finished, by route and outcome (ok, client_gone, the error's "
            "reason code, or http_<status>)",
            ["route", "outcome"],
            registry=self.registry,
        )
        self.first_byte = Histogram(
            "relay_time_to_first_byte_seconds",
            "From a request's arrival to the first byte of its answer",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.upstream_latency = Histogram(
            "relay_upstream_latency_seconds",
            "From sending a request upstream to its first event (or its end, without one)",
            ["provider"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.refused_params = Counter(
            "relay_refused_params",
            "Requests refused for a parameter the relay cannot honour (previous_response_id, "
            "...), by parameter; other for one outside the relay's fixed list",
            ["param"],
            registry=self.registry,
        )
        self.errors = ErrorTally()
        self.replay_history = CounterHistory()  # dispatched/accepted, for the last hour
        self.fence_history = CounterHistory()  # fences by reason, for the last hour
        self.started_monotonic = 0.0
        self.started_wall = 0.0

    def started(self, monotonic: float, wall: float) -> None:
        self.started_monotonic, self.started_wall = monotonic, wall
        self.fence_history.record(monotonic, {})  # none at start: the window's baseline

    def request_finished(self, path: str, status: int, code: str | None, wall: float) -> str:
        """Count one finished request; its outcome label is returned."""
        outcome = code if code is not None else OK if status < 400 else f"http_{status:d}"
        if outcome != OK:
            outcome = self.errors.add(outcome, wall)
        self.requests.labels(route_of(path), outcome).inc()
        return outcome

    def parameter_refused(self, param: str | None) -> None:
        label = param if param in REFUSABLE_PARAMS else "other"
        self.refused_params.labels(label).inc()

    def observe_first_byte(self, path: str, seconds: float) -> None:
        self.first_byte.labels(route_of(path)).observe(max(0.0, seconds))

    def observe_upstream(self, provider: str, seconds: float) -> None:
        self.upstream_latency.labels(provider).observe(max(0.0, seconds))

    def request_counts(self) -> dict[str, dict[str, int]]:
        """Requests by route, then outcome (for status)."""
        out: dict[str, dict[str, int]] = {}
        for family in self.requests.collect():
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    route, outcome = sample.labels["route"], sample.labels["outcome"]
                    out.setdefault(route, {})[outcome] = int(sample.value)
        return out

    def render(self) -> bytes:
        """The Prometheus text exposition of everything in the registry."""
        return generate_latest(self.registry)
