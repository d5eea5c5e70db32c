"""The relay process: build the application, start (with the embedded fake when there is no
key), and shut down in order."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tornado.web import Application, RequestHandler

from relay.app.listeners import bind_listeners
from relay.app.offline import OfflineUpstream, OfflineUpstreamFactory, load_offline_upstream
from relay.app.runtime import Runtime
from relay.cache.replay_cache import EMBEDDED_FAKE_ORIGIN, ReplayCache
from relay.cache.retention import RetentionCleanup, WatchedClock
from relay.cache.shared_store import LeaseKeeper
from relay.clock import Clock, SystemClock
from relay.handlers.base import HealthHandler, NotFoundHandler
from relay.handlers.cache_api import CacheApiHandler
from relay.handlers.chat import ChatCompletionsHandler
from relay.handlers.models import ModelsHandler
from relay.handlers.ready import ReadyHandler, UpstreamProbe
from relay.handlers.responses import ResponsesHandler
from relay.http.auth import ensure_private_dir, load_or_create_secret, open_token
from relay.http.routes import ROUTES
from relay.observability import log
from relay.observability.body_log import BodyLog
from relay.ops.metrics import RelayMetrics
from relay.ops.services import Operations
from relay.settings.config import Config
from relay.settings.providers import BUILTIN, Provider
from relay.strict.strict_cache import StrictCache
from relay.transport.http_server import RelayHTTPServer
from relay.transport.upstream import ClientGone, make_http_client
from relay.tunnel.supervisor import Tunnel
from relay.upstream.models import ModelCatalog

EMBEDDED_FAKE_KEY = "sk-embedded-offline-fake"
OFFLINE_KEY_FILE = "offline-fake.key"  # the embedded fake's sealing key, in the data dir


def make_app(runtime: Runtime) -> Application:
    args: dict[str, Any] = {"runtime": runtime}
    models = {**args, "models": ModelCatalog(runtime)}
    handlers: dict[str, tuple[type[RequestHandler], dict[str, Any]]] = {
        "chat_completions": (ChatCompletionsHandler, args),
        "responses": (ResponsesHandler, args),
        "models": (ModelsHandler, models),
        "cache_api": (CacheApiHandler, args),
        "healthz": (HealthHandler, args),
        "readyz": (ReadyHandler, {**args, "probe": UpstreamProbe(runtime)}),
    }
    return Application(
        [(route.pattern, *handlers[route.label]) for route in ROUTES],
        default_handler_class=NotFoundHandler,
        default_handler_args=args,
        compress_response=False,
    )


@dataclass
class RelayServer:
    config: Config
    clock: Clock = field(default_factory=SystemClock)
    runtime: Runtime | None = None
    port: int | None = None
    token_path: str | None = None
    token_created: bool = False  # the token file was written by this start
    # What to serve from without OPENAI_API_KEY (the command line passes the installed
    # one, relay.app.offline); the running one is ``fake``.
    offline: OfflineUpstreamFactory | None = None
    fake: OfflineUpstream | None = None
    tunnel: Tunnel | None = None  # RELAY_TUNNEL_CMD's program, started last, stopped first
    _http: RelayHTTPServer | None = None
    ops: Operations | None = None  # admin socket, /metrics (relay.ops)

    async def start(self) -> int:
        """Bind every listener, then start everything else; a failure anywhere (a port in
        use, a locked store) releases what was already started -- the store's lock first
        of all, so that the next attempt can own it -- and raises. Listeners come first:
        a port in use stops startup before the store is opened or the token written."""
        config = self.config
        # Private whether or not it holds the token: the cache lives there too.
        ensure_private_dir(config.data_dir)
        async with contextlib.AsyncExitStack() as undo:
            undo.callback(self._forget_start)  # runs last: after a failure, nothing is held
            listeners = bind_listeners(config)
            undo.callback(listeners.close)
            # Before the cache: a refused body directory must not leave the store locked.
            body_log = BodyLog.open(config.bodies_dir, self.clock) if config.log_bodies else None
            if body_log is not None:
                undo.callback(body_log.close)
            if config.relay_token is not None:
                token = config.relay_token
            else:
                token, path, self.token_created = open_token(config.data_dir)
                self.token_path = str(path)
            if config.uses_embedded_fake:
                factory = self.offline or load_offline_upstream()
                # Kept in the data directory: the fake's ciphertext verifies after a restart.
                secret = load_or_create_secret(
                    config.data_dir / OFFLINE_KEY_FILE, what="offline fake's sealing key"
                )
                fake = self.fake = factory(clock=self.clock, secret=secret)
                await fake.start("127.0.0.1", 0)
                undo.push_async_callback(fake.stop)
                base_url, api_key = fake.base_url.rstrip("/"), EMBEDDED_FAKE_KEY
            else:
                assert config.openai_api_key is not None
                base_url, api_key = config.openai_base_url, config.openai_api_key
            builtin = Provider(
                BUILTIN, "responses", base_url, api_key, api_key_env="OPENAI_API_KEY"
            )
            upstream_url = builtin.url
            # The cache's wall readings feed the retention deletion barrier, begun here.
            cache_clock = WatchedClock(self.clock)
            cache = ReplayCache.open(
                config,
                cache_clock,
                upstream_url=upstream_url,
                upstream_credential=api_key,
                relay_token=token,
                new_id=Runtime.new_id,
                upstream_origin=EMBEDDED_FAKE_ORIGIN if config.uses_embedded_fake else None,
            )
            undo.callback(cache.close)  # releases the store's exclusive lock
            budget = config.cache_budget
            if cache.enabled and budget.concurrency_warning() is not None:
                log.event(
                    "cache_concurrency_limited",
                    logging.WARNING,
                    configured=budget.max_concurrent,
                    effective=budget.effective_concurrent,
                    raise_setting="REASONING_CACHE_MEMORY_BYTES",
                    memory_needed=budget.memory_for(budget.max_concurrent),
                )
            strict = StrictCache(
                clock=self.clock,
                store=cache.store if cache.enabled else None,
                relay_token=token,
                ttl_s=config.reasoning_cache_strict_ttl_seconds,
                memory_entries=config.reasoning_cache_strict_memory_entries,
                max_entry_bytes=config.reasoning_cache_max_entry_bytes,
            )
            http_client = make_http_client(self.clock)
            undo.callback(http_client.close)
            self.runtime = Runtime(
                config=config,
                clock=self.clock,
                relay_token=token,
                upstream_url=upstream_url,
                upstream_api_key=api_key,
                http_client=http_client,
                cache=cache,
                strict=strict,
                providers={**config.providers, BUILTIN: builtin},
                metrics=RelayMetrics(),
                body_log=body_log,
            )
            if cache.enabled and cache.store is not None:
                self.runtime.retention = RetentionCleanup(
                    cache.store,
                    cache_clock,
                    retention_s=config.reasoning_cache_retention_days * 86_400.0,
                    every_s=config.reasoning_cache_cleanup_interval_ms / 1000,
                )
            self.runtime.leases = LeaseKeeper.for_cache(
                cache, cache_clock, retention_s=config.reasoning_cache_retention_days * 86_400.0
            )
            self._http = RelayHTTPServer(
                make_app(self.runtime),
                idle_connection_timeout=config.idle_timeout_ms / 1000,
                header_timeout=config.header_timeout_ms / 1000,
                body_timeout=config.idle_timeout_ms / 1000,
                max_connections=config.max_connections,
                clock=self.clock,
                # The per-request limit is enforced by the chat handler with a proper 413.
                max_body_size=2**62,
                new_id=Runtime.new_id,
            )
            ops = self.ops = Operations(self.runtime, offline_fake=self.fake is not None)
            undo.push_async_callback(ops.stop)  # also after a start that failed half-way
            ops.start(listeners)
            undo.pop_all()  # started: stop() releases it all from here on
        self._http.add_sockets(listeners.relay)
        self.port = listeners.port
        strict.start_cleanup()
        if self.runtime.retention is not None:
            self.runtime.retention.start()
        if self.runtime.leases is not None:
            self.runtime.leases.start()
        return self.port

    def _forget_start(self) -> None:
        self.runtime = self.fake = self.ops = self._http = None
        self.token_path = None
        self.token_created = False

    async def start_tunnel(self) -> None:
        """Start ``RELAY_TUNNEL_CMD``'s program, if set, once the banner is out (what it
        prints then follows the banner)."""
        if self.config.tunnel_command is None or self.runtime is None or self.port is None:
            return
        self.tunnel = Tunnel.for_relay(
            self.config,
            clock=self.clock,
            port=self.port,
            relay_token=self.runtime.relay_token,
            token_path=self.token_path,
            upstream_key=self.runtime.upstream_api_key,
        )
        self.runtime.tunnel = self.tunnel  # for status and /readyz
        await self.tunnel.start()

    def banner(self) -> list[str]:
        assert self.runtime is not None
        assert self.port is not None
        host = self.config.host if ":" not in self.config.host else f"[{self.config.host}]"
        lines = [f"relay listening on http://{host}:{self.port}/v1"]
        if self.fake is not None:
            lines.append(
                "upstream: OFFLINE FAKE (no OPENAI_API_KEY set) - answers come from the built-in "
                f"fake Responses API at {self.fake.base_url}, not from a real model"
            )
        else:
            lines.append(f"upstream: {self.runtime.upstream_url}")
        for provider in self.config.providers.values():
            lines.append(
                f"provider {provider.name}: {provider.kind} at {provider.url} "
                f"(key from {provider.api_key_env}, strict {provider.strict_setting})"
            )
        lines.append(f"data directory: {self.config.data_dir}")
        if self.token_path is None:
            lines.append("relay token: RELAY_TOKEN from the environment")
        elif self.token_created:
            lines.append(
                f"relay token: generated a new relay token in {self.token_path} "
                "(send it as a Bearer token)"
            )
        else:
            lines.append(
                f"relay token: using the relay token in {self.token_path} "
                "(send it as a Bearer token)"
            )
        if self.runtime.cache.enabled:
            budget = self.config.cache_budget
            where = self.config.reasoning_cache_url or self.config.cache_path
            lines.append(
                f"reasoning cache: on ({where}); up to "
                f"{budget.effective_concurrent} cache sessions at once"
            )
            if (warning := budget.concurrency_warning()) is not None:
                lines.append(f"WARNING: {warning}")
        elif self.config.reasoning_cache_url is not None:
            lines.append(cache_off_over_shared_store_warning(self.config.reasoning_cache_url))
        elif self.runtime.cache.store is not None:
            lines.append(cache_off_over_store_warning(self.config.cache_path))
        else:
            lines.append("reasoning cache: off (REASONING_CACHE_ENABLED=1 turns it on)")
        if self.ops is not None:
            lines += self.ops.banner()
        if self.runtime.body_log is not None:
            lines.append(
                f"WARNING: LOG_BODIES=1: request and response bodies (prompts, answers, "
                f"ciphertext) are being written to {self.config.bodies_dir}"
            )
        return lines

    async def stop(self) -> None:
        """Stop new work, abort live generations, close connections, then the rest."""
        if self.tunnel is not None:
            await self.tunnel.stop()  # first: no new public traffic
        if self.runtime is not None:
            self.runtime.shutting_down = True
        if self._http is not None:
            self._http.stop()
        if self.runtime is not None:
            for exchange in list(self.runtime.active):
                exchange.abort(ClientGone())
            for session in list(self.runtime.sessions):
                session.abort("shutdown")  # poisons what was generating, before the store closes
        if self._http is not None:
            await self._http.close_all_connections()
        if self.ops is not None:
            await self.ops.stop()  # waits for a running snapshot: the store closes below
        if self.runtime is not None:
            self.runtime.http_client.close()
            self.runtime.strict.stop_cleanup()
            if self.runtime.retention is not None:
                self.runtime.retention.stop()
            if self.runtime.leases is not None:
                self.runtime.leases.stop()
            self.runtime.cache.close()
            if self.runtime.body_log is not None:
                self.runtime.body_log.close()
        if self.fake is not None:
            await self.fake.stop()
        log.event("relay_stopped")


def cache_off_over_store_warning(path: object) -> str:
    """The banner's line for a cache-off start over an existing store (design §7)."""
    return (
        f"WARNING: reasoning cache: off, over the existing store {path}: the first model "
        "request this run forwards records a coverage gap, and the next start with the "
        "cache on then stops replaying every conversation stored so far; to keep them, "
        "stop now and start with REASONING_CACHE_ENABLED=1 (a run that forwards no model "
        "request changes nothing)"
    )


def cache_off_over_shared_store_warning(url: object) -> str:
    """The banner's line for a cache-off relay on the shared store (design §22)."""
    return (
        f"WARNING: reasoning cache: off on this relay, over the shared store {url}: every "
        "reasoning request it forwards first stops replay of every conversation stored so "
        "far, for all relays; set REASONING_CACHE_ENABLED=1 on every relay of the store"
    )


async def serve_forever(
    server: RelayServer, stop_event: asyncio.Event, *, settled: Callable[[], None] | None = None
) -> None:
    """Start ``server``, call ``settled`` (the process's startup is over: ``relay serve``
    tunes the collector there, :mod:`relay.app.heap`), print the banner, run the tunnel
    until ``stop_event``, then stop."""
    await server.start()
    if settled is not None:
        settled()
    try:
        for line in server.banner():
            print(line, flush=True)
        await server.start_tunnel()
        await stop_event.wait()
    finally:  # a banner that cannot be printed or a tunnel that cannot start still stops
        await server.stop()
