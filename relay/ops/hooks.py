"""The request shell's calls into the counters, kept to one line at each call site."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from relay.core.token_usage import Usage
from relay.ops.collector import replay_totals
from relay.ops.metrics import relay_metrics

if TYPE_CHECKING:
    from relay.app.runtime import Runtime


def request_finished(runtime: Runtime, path: str, status: int, code: str | None) -> None:
    """Count a finished (or abandoned) request, and sample the replay and fence totals for
    the last-hour figures (at most once a minute: relay.ops.window.CounterHistory)."""
    clock, metrics = runtime.clock, relay_metrics(runtime)
    metrics.request_finished(path, status, code, clock.wall())
    metrics.replay_history.record(clock.monotonic(), replay_totals(runtime.cache.metrics.replay))
    metrics.fence_history.record(clock.monotonic(), runtime.cache.metrics.fences)


def answer_finished(
    runtime: Runtime, shape: str, model: Any, replay: str | None, usage: Usage | None
) -> None:
    """A relayed generation request finished: its usage against its replay outcome."""
    if runtime.tokens is not None:
        runtime.tokens.answered(shape, model, replay, usage)


def first_byte(runtime: Runtime, seconds: float, upstream_wait: float | None) -> None:
    """The relay's own share of a time to first byte: all of it less the upstream's wait
    (``None``: nothing went upstream, so there is no share to speak of)."""
    if upstream_wait is not None and runtime.tokens is not None:
        runtime.tokens.added_latency(seconds - upstream_wait)
