"""The upstream's own model list for ``GET /v1/models``: fetched, cached, shared, never fatal.

:func:`fetch_models` asks ``GET {base}/models`` with the upstream key, through the relay's
upstream client (kept-alive connections), within ``FETCH_TIMEOUT_S`` and
``RELAY_MAX_RESPONSE_BYTES``; every way that can fail (unreachable, non-2xx, malformed,
too large, timed out) is one :class:`ModelsUnavailable` with a reason code.

:class:`UpstreamModels` keeps a good answer for ``TTL_S`` on the injected monotonic clock.
A failure is logged as one line and remembered as "no upstream models" for ``RETRY_S``: the
page then lists the aliases alone, and a down upstream costs one timeout per ``RETRY_S``,
not one per request. While a fetch is in flight, every caller awaits that same fetch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

from tornado.httputil import HTTPInputError
from tornado.iostream import StreamClosedError, UnsatisfiableReadError

from relay.clock import Clock, Deadline
from relay.errors import InternalSignal
from relay.observability import log
from relay.settings.config import Config
from relay.settings.providers import BUILTIN, Provider
from relay.transport.upstream import origin_of
from relay.transport.upstream_client import UpstreamClient
from relay.upstream.model_list import (
    MalformedModelList,
    UpstreamModel,
    models_page,
    parse_upstream_models,
)

TTL_S: Final = 300.0
RETRY_S: Final = 30.0
FETCH_TIMEOUT_S: Final = 5.0  # a listing is small: a slower upstream is treated as down

Fetch = Callable[[], Awaitable[tuple[UpstreamModel, ...]]]


class Upstreams(Protocol):
    """What a model list is asked with: the relay's runtime (``relay.app.runtime``), read
    through this so that the upstream package sits below the shell that assembles it."""

    @property
    def config(self) -> Config: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def http_client(self) -> UpstreamClient: ...

    @property
    def providers(self) -> Mapping[str, Provider]: ...

    @property
    def builtin_provider(self) -> Provider: ...

    def headers_for(self, provider: Provider, *, json_answer: bool = False) -> dict[str, str]: ...


class ModelsUnavailable(InternalSignal):
    """The upstream did not give its model list. ``reason``: ``unreachable``, ``timeout``,
    ``http_status``, ``malformed`` or ``too_large``."""

    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason if status is None else f"{reason} (HTTP {status})")
        self.reason = reason
        self.status = status


async def fetch_models(
    client: UpstreamClient,
    clock: Clock,
    url: str,
    headers: Mapping[str, str],
    *,
    max_bytes: int,
    timeout_s: float = FETCH_TIMEOUT_S,
) -> tuple[UpstreamModel, ...]:
    """The models listed at ``url``, or :class:`ModelsUnavailable`."""
    aborted: list[str] = []
    # The deadline, on the injected clock, bounds the whole fetch: past it the request
    # (connecting, waiting or reading) is cancelled and its connection closed.
    task = asyncio.ensure_future(_get(client, url, dict(headers), max_bytes, timeout_s))

    def expire() -> None:
        aborted.append("timeout")
        task.cancel()

    deadline = Deadline(clock, timeout_s, expire)
    try:
        code, body = await task
    except asyncio.CancelledError:
        if aborted:
            raise ModelsUnavailable("timeout") from None
        raise
    except ModelsUnavailable:
        raise
    except TimeoutError:
        raise ModelsUnavailable("timeout") from None  # connecting took too long
    except (OSError, StreamClosedError, UnsatisfiableReadError, HTTPInputError):
        raise ModelsUnavailable("unreachable") from None
    finally:
        deadline.stop()
    if not 200 <= code < 300:
        raise ModelsUnavailable("http_status", code)
    try:
        return parse_upstream_models(body)
    except MalformedModelList:
        raise ModelsUnavailable("malformed", code) from None


async def _get(
    client: UpstreamClient, url: str, headers: dict[str, str], max_bytes: int, timeout_s: float
) -> tuple[int, bytes]:
    """GET ``url``: the status and the body (within ``max_bytes``, else too_large)."""
    response = await client.request("GET", url, headers, None, connect_timeout_s=timeout_s)
    body = bytearray()
    try:
        while (data := await response.read()) is not None:
            if len(body) + len(data) > max_bytes:
                raise ModelsUnavailable("too_large")
            body += data
    finally:
        if not response.ended:
            response.close()  # never reused: cut short
    return response.code, bytes(body)


class UpstreamModels:
    def __init__(
        self,
        fetch: Fetch,
        clock: Clock,
        *,
        origin: str,
        ttl_s: float = TTL_S,
        retry_s: float = RETRY_S,
    ) -> None:
        self._fetch = fetch
        self._clock = clock
        self._origin = origin  # for the log line: scheme, host and port only
        self._ttl_s = ttl_s
        self._retry_s = retry_s
        self._models: tuple[UpstreamModel, ...] = ()
        self._fresh_until: float | None = None  # None: never fetched
        self._inflight: asyncio.Future[tuple[UpstreamModel, ...]] | None = None
        self.fetches = 0  # fetches started, for tests and diagnostics

    @classmethod
    def for_runtime(cls, runtime: Upstreams) -> UpstreamModels:
        """The built-in upstream's list, asked as a model call is (URL, key, client)."""
        return cls.for_provider(runtime, runtime.builtin_provider)

    @classmethod
    def for_provider(cls, runtime: Upstreams, provider: Provider) -> UpstreamModels:
        """``GET {base_url}/models`` of one provider, with its key (OpenAI-compatible
        providers answer it; one that cannot is listed with no models)."""
        url = provider.base_url + "/models"
        headers = runtime.headers_for(provider, json_answer=True)
        del headers["Content-Type"]  # a GET has no body

        async def fetch() -> tuple[UpstreamModel, ...]:
            return await fetch_models(
                runtime.http_client,
                runtime.clock,
                url,
                headers,
                max_bytes=runtime.config.max_response_bytes,
            )

        return cls(fetch, runtime.clock, origin=origin_of(url))

    async def fetch_now(self) -> tuple[UpstreamModel, ...]:
        """One fetch, uncached; raises :class:`ModelsUnavailable` (the /readyz probe)."""
        return await self._fetch()

    async def current(self) -> tuple[UpstreamModel, ...]:
        """The upstream's models; ``()`` while it cannot say. Never raises."""
        if self._fresh_until is not None and self._clock.monotonic() < self._fresh_until:
            return self._models
        if self._inflight is None:
            self._inflight = asyncio.ensure_future(self._refresh())
        # Shielded: one caller going away must not cancel the fetch the others await.
        return await asyncio.shield(self._inflight)

    async def _refresh(self) -> tuple[UpstreamModel, ...]:
        self.fetches += 1
        try:
            try:
                models = await self._fetch()
                keep_s = self._ttl_s
            except Exception as exc:  # whatever happens, the page still lists the aliases
                self._log_failure(exc)
                models, keep_s = (), self._retry_s
            self._models = models
            self._fresh_until = self._clock.monotonic() + keep_s
            return models
        finally:
            self._inflight = None

    def _log_failure(self, exc: Exception) -> None:
        """One line: a reason code, the HTTP status if any, the upstream's origin."""
        fields: dict[str, object] = {}
        if isinstance(exc, ModelsUnavailable):
            fields["reason"] = exc.reason
            if exc.status is not None:
                fields["status"] = exc.status
        else:
            fields |= {"reason": "error", "kind": type(exc).__name__}
        fields |= {"upstream": self._origin, "fallback": "aliases", "retry_s": self._retry_s}
        log.event("models_upstream_unavailable", level=logging.WARNING, **fields)


class ModelCatalog:
    """Every listed model: the aliases, the built-in upstream's, each provider's."""

    def __init__(self, runtime: Upstreams) -> None:
        self._aliases = runtime.config.model_aliases
        self._builtin = UpstreamModels.for_runtime(runtime)
        self._providers = {
            name: UpstreamModels.for_provider(runtime, provider)
            for name, provider in runtime.providers.items()
            if name != BUILTIN
        }

    async def page(self) -> dict[str, Any]:
        """The ``GET /v1/models`` answer; the lists are fetched concurrently. Never raises."""
        names = list(self._providers)
        builtin, *listed = await asyncio.gather(
            self._builtin.current(), *(self._providers[n].current() for n in names)
        )
        return models_page(self._aliases, builtin, dict(zip(names, listed, strict=True)))
