"""What the server starts for operating the relay, and stops before the store closes."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from relay.core.token_usage import HourDelta, hour_of
from relay.ops.admin_protocol import AdminService
from relay.ops.admin_socket import AdminSocket
from relay.ops.collector import RuntimeCollector
from relay.ops.dashboard import Snapshot, hours_of
from relay.ops.dashboard import render as render_dashboard
from relay.ops.metrics import relay_metrics
from relay.ops.metrics_http import MetricsListener
from relay.ops.snapshot import Snapshotter
from relay.ops.status import status_document
from relay.ops.store_sample import StoreSampler
from relay.ops.token_stats import TokenAccounting, token_accounting

if TYPE_CHECKING:
    from relay.app.listeners import Listeners
    from relay.app.runtime import Runtime


def cache_events(runtime: Runtime) -> dict[tuple[str, str], int]:
    """The replay cache's totals by reason, for the hourly tallies: upstream rejections
    of replayed state, fences, and the plan's reasons for not replaying a block."""
    metrics = runtime.cache.metrics
    out: dict[tuple[str, str], int] = {}
    for (_, _, kind), n in metrics.replay.rejected.items():
        out["rejected", kind.value] = out.get(("rejected", kind.value), 0) + n
    for reason, n in metrics.fences.items():
        out["fenced", reason] = n
    for reason, n in metrics.rejections.items():
        out["declined", reason] = n
    return out


class Operations:
    def __init__(self, runtime: Runtime, *, offline_fake: bool) -> None:
        config, clock = runtime.config, runtime.clock
        relay_metrics(runtime).started(clock.monotonic(), clock.wall())
        runtime.tokens = TokenAccounting.open(
            clock,
            config.cache_path,
            retention_days=config.stats_retention_days,
            counters=lambda: cache_events(runtime),
            prices=config.token_prices,
        )
        self.sampler = StoreSampler(runtime.cache.store, clock)
        self.snapshots = Snapshotter(runtime.cache.store, config.admin_snapshot_dir, clock)
        relay_metrics(runtime).registry.register(RuntimeCollector(runtime, self.sampler))
        self.service = AdminService(
            runtime, self.sampler, self.snapshots, offline_fake=offline_fake
        )
        self.admin: AdminSocket | None = None
        self.metrics_http: MetricsListener | None = None
        self._note: str | None = None  # why the default admin socket is off
        self._runtime = runtime

    def start(self, listeners: Listeners) -> None:
        """Serve on the listeners bound at startup (relay.app.listeners)."""
        if listeners.admin is not None and listeners.admin_path is not None:
            self.admin = AdminSocket(self.service)
            self.admin.adopt(listeners.admin, listeners.admin_path)
        if listeners.metrics is not None:
            self.metrics_http = MetricsListener(relay_metrics(self._runtime), page=self.dashboard)
            self.metrics_http.adopt(listeners.metrics)
            self.service.metrics_url = self.metrics_url
        self._note = listeners.admin_note
        tokens = token_accounting(self._runtime)
        if tokens is not None:
            tokens.start()

    def dashboard(self) -> str:
        """The dashboard page, rendered from the status document and the last day's hours."""
        runtime = self._runtime
        status = status_document(
            runtime, self.sampler, self.snapshots,
            offline_fake=self.service.offline_fake, metrics_url=self.metrics_url,
        )  # fmt: skip
        tokens = token_accounting(runtime)
        now_hour = hour_of(runtime.clock.wall())
        hours = hours_of(tokens.recent(24) if tokens is not None else HourDelta(), now_hour)
        stats_bytes = None
        if tokens is not None and tokens.db is not None:
            with contextlib.suppress(OSError):
                stats_bytes = tokens.db.size_bytes()
        retention = runtime.retention.to_json() if runtime.retention is not None else None
        return render_dashboard(
            Snapshot(status, hours, retention=retention, stats_bytes=stats_bytes)
        )

    @property
    def metrics_url(self) -> str | None:
        if self.metrics_http is None:
            return None
        return f"http://127.0.0.1:{self.metrics_http.port}/metrics"

    def banner(self) -> list[str]:
        lines = [] if self._note is None else [self._note]
        if self.admin is not None and self.admin.path is not None:
            lines.append(f"admin socket: {self.admin.path} (relay status, relay admin ...)")
        url = self.metrics_url
        if url is not None:
            lines.append(f"metrics: {url}")
            lines.append(f"dashboard: {url.removesuffix('metrics')}")
        return lines

    async def stop(self) -> None:
        """Close the listeners, then wait for a running snapshot (the store closes next)."""
        if self.admin is not None:
            self.admin.close()
        if self.metrics_http is not None:
            await self.metrics_http.close()
        await self.snapshots.wait_idle()
        tokens = token_accounting(self._runtime)
        if tokens is not None:
            await tokens.stop()  # the last hour's tallies, written
