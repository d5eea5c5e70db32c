"""What every handler shares: configuration, clock, upstream client and live requests."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from tornado.simple_httpclient import SimpleAsyncHTTPClient

from relay.clock import Clock
from relay.config import Config
from relay.reasoning.cache import ReplayCache
from relay.reasoning.session import CacheSession
from relay.transport.upstream import UpstreamExchange, UpstreamLimits


@dataclass
class Runtime:
    config: Config
    clock: Clock
    relay_token: str
    upstream_url: str
    upstream_api_key: str
    http_client: SimpleAsyncHTTPClient
    cache: ReplayCache
    shutting_down: bool = False
    active: set[UpstreamExchange] = field(default_factory=set)
    sessions: set[CacheSession] = field(default_factory=set)

    @property
    def upstream_limits(self) -> UpstreamLimits:
        return UpstreamLimits(
            idle_timeout_s=self.config.idle_timeout_ms / 1000,
            max_response_bytes=self.config.max_response_bytes,
            max_sse_event_bytes=self.config.max_sse_event_bytes,
        )

    def upstream_headers(self) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self.upstream_api_key}",
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
        }

    @staticmethod
    def new_id(prefix: str) -> str:
        return prefix + secrets.token_hex(12)
