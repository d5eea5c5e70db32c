"""What every handler shares: configuration, clock, upstream client and live requests."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from relay.cache.replay_cache import ReplayCache, UpstreamIdentity
from relay.cache.retention import RetentionCleanup
from relay.cache.session import CacheSession
from relay.cache.shared_store import LeaseKeeper
from relay.clock import Clock
from relay.core.token_usage import Usage
from relay.observability.body_log import BodyLog
from relay.settings.config import Config
from relay.settings.providers import BUILTIN, Provider
from relay.strict.strict_cache import StrictCache
from relay.transport.upstream import UpstreamExchange, UpstreamLimits
from relay.transport.upstream_client import UpstreamClient
from relay.upstream.health import UpstreamHealth

if TYPE_CHECKING:
    from relay.tunnel.supervisor import Tunnel


class RequestMetrics(Protocol):
    """What the request shell records. The server injects ``relay.ops.metrics.RelayMetrics``:
    operations observe the runtime from above, the runtime imports nothing of them."""

    def parameter_refused(self, param: str | None) -> None: ...

    def observe_first_byte(self, path: str, seconds: float) -> None: ...

    def observe_upstream(self, provider: str, seconds: float) -> None: ...


class TokenRecorder(Protocol):
    """What the request shell records of token usage. Operations inject
    ``relay.ops.token_stats.TokenAccounting`` at start and read the rest of it through
    ``relay.ops.token_stats.token_accounting``; the runtime imports nothing of them."""

    def answered(self, shape: str, model: Any, header: str | None, usage: Usage | None) -> None:
        """One relayed generation finished: its usage against its replay outcome."""

    def added_latency(self, seconds: float) -> None:
        """The relay's own share of one request's time to first byte."""


@dataclass
class Runtime:
    config: Config
    clock: Clock
    relay_token: str
    upstream_url: str
    upstream_api_key: str
    http_client: UpstreamClient
    cache: ReplayCache
    strict: StrictCache
    providers: Mapping[str, Provider]  # the configured ones and the built-in "openai"
    metrics: RequestMetrics  # this relay's own (relay.ops.metrics.RelayMetrics)
    retention: RetentionCleanup | None = None  # payload cleanup, when caching is on
    leases: LeaseKeeper | None = None  # the shared PostgreSQL store's lease heartbeat
    shutting_down: bool = False
    active: set[UpstreamExchange] = field(default_factory=set)
    sessions: set[CacheSession] = field(default_factory=set)
    body_log: BodyLog | None = None  # LOG_BODIES=1
    tunnel: Tunnel | None = None  # RELAY_TUNNEL_CMD's program, once started
    upstream_health: UpstreamHealth = field(default_factory=UpstreamHealth)  # for /readyz
    dropped_params: set[str] = field(default_factory=set)  # logged once each per process
    tokens: TokenRecorder | None = None  # usage by replay outcome (relay.ops, at start)

    @property
    def upstream_limits(self) -> UpstreamLimits:
        return UpstreamLimits(
            idle_timeout_s=self.config.idle_timeout_ms / 1000,
            max_response_bytes=self.config.max_response_bytes,
            max_sse_event_bytes=self.config.max_sse_event_bytes,
        )

    @property
    def builtin_provider(self) -> Provider:
        return self.providers[BUILTIN]

    def upstream_headers(self) -> dict[str, str]:
        return self.headers_for(self.builtin_provider)

    def headers_for(self, provider: Provider, *, json_answer: bool = False) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {provider.api_key}",
            "Content-Type": "application/json",
            "Accept": "application/json" if json_answer else "text/event-stream",
        }

    def cache_identity(self, provider: Provider) -> UpstreamIdentity | None:
        """The replay cache's view of a Responses provider (``None``: the built-in)."""
        if provider.name == BUILTIN:
            return None
        return UpstreamIdentity.of(provider.url, provider.api_key)

    @staticmethod
    def reach_hint(provider: Provider) -> str:
        if provider.name == BUILTIN:
            return "check OPENAI_BASE_URL and the network"
        return f"check RELAY_PROVIDERS[{provider.name!r}].base_url and the network"

    @staticmethod
    def new_id(prefix: str) -> str:
        return prefix + secrets.token_hex(12)
