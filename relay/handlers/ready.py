"""``GET /readyz``: is this relay ready to serve model calls? No token, like ``/healthz``
(which stays the liveness check: the process answers). 200 when every check passes, else
503; the body says which failed, by code only (no path, URL or key):

- ``upstream``: the built-in upstream is reachable (relay.upstream.health: the last model
  exchange, else a ``GET /models`` probe at most once per ``FRESH_S``; never a generation).
- ``cache``: with caching on, the store is usable: not latched (``.guard``) and a payload
  would be admitted (not over REASONING_CACHE_DISK_BYTES, the reserve held, free space).
  With caching off it is not a reason to be unready.
- ``tunnel``: with RELAY_TUNNEL_CMD, its program runs and has reported a public URL.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from relay.app.runtime import Runtime
from relay.handlers.base import BaseHandler
from relay.upstream.health import probe_outcome
from relay.upstream.models import ModelsUnavailable, UpstreamModels


class ReadyHandler(BaseHandler):
    requires_auth = False

    def initialize(  # type: ignore[override]  # Tornado passes the route's arguments
        self, runtime: Runtime, probe: UpstreamProbe
    ) -> None:
        super().initialize(runtime)
        self.probe = probe

    async def get(self) -> None:
        checks = {
            "upstream": await self.probe.check(),
            "cache": cache_check(self.runtime),
            "tunnel": tunnel_check(self.runtime),
        }
        ready = all(check["ok"] for check in checks.values())
        self.set_status(200 if ready else 503)
        self.finish(json.dumps({"status": "ready" if ready else "not_ready", "checks": checks}))


def cache_check(runtime: Runtime) -> dict[str, Any]:
    cache = runtime.cache
    if not cache.enabled:
        return {"ok": True, "state": "off"}
    safety = cache.safety
    if safety is not None and safety.latched:
        return {"ok": False, "state": "latched"}
    pressure = safety.pressure() if safety is not None else None
    if pressure is not None:
        return {"ok": False, "state": "full", "reason": pressure.value}
    return {"ok": True, "state": "on"}


def tunnel_check(runtime: Runtime) -> dict[str, Any]:
    if runtime.config.tunnel_command is None:
        return {"ok": True, "state": "off"}
    tunnel = runtime.tunnel
    state = "starting" if tunnel is None else tunnel.state
    return {"ok": state == "up", "state": state}


class UpstreamProbe:
    """The upstream check: fresh evidence, else one ``GET /models`` shared by concurrent
    callers (a flood of unauthenticated /readyz costs the upstream one listing per
    ``FRESH_S``)."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._models = UpstreamModels.for_runtime(runtime)
        self._inflight: asyncio.Future[None] | None = None

    async def check(self) -> dict[str, Any]:
        runtime = self._runtime
        health = runtime.upstream_health
        if health.fresh(runtime.clock.monotonic()) is None:
            if self._inflight is None:
                self._inflight = asyncio.ensure_future(self._probe())
            await asyncio.shield(self._inflight)
        last = health.last
        assert last is not None
        age = max(0.0, runtime.clock.monotonic() - last.at)
        return {"ok": last.ok, "state": last.detail, "checkedSecondsAgo": round(age, 3)}

    async def _probe(self) -> None:
        try:
            reason: str | None = None
            status: int | None = None
            try:
                await self._models.fetch_now()
            except ModelsUnavailable as exc:
                reason, status = exc.reason, exc.status
            except Exception:  # whatever it is, the upstream did not answer usefully
                reason = "unreachable"
            ok, detail = probe_outcome(reason, status)
            self._runtime.upstream_health.record(ok, detail, self._runtime.clock.monotonic())
        finally:
            self._inflight = None
