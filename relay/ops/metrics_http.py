"""``RELAY_METRICS_PORT``: ``GET /metrics`` on a listener of its own, bound to 127.0.0.1.

Never on the relay's public port (a tunnel exposes that one); no token, because only local
processes can reach loopback. ``GET /`` is the dashboard (relay.ops.dashboard), a page
that loads nothing else (its Content-Security-Policy forbids it). Anything else is a 404.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Final

from tornado.httpserver import HTTPServer
from tornado.web import Application, RequestHandler

from relay.ops.metrics import RelayMetrics

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Inline styles and SVG only: no script, no request to anywhere, not even this origin.
DASHBOARD_CSP: Final = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


class MetricsHandler(RequestHandler):
    def initialize(self, metrics: RelayMetrics) -> None:
        self.metrics = metrics

    def get(self) -> None:
        self.set_header("Content-Type", CONTENT_TYPE)
        self.set_header("Cache-Control", "no-store")
        self.finish(self.metrics.render())


class DashboardHandler(RequestHandler):
    def initialize(self, page: Callable[[], str]) -> None:
        self.page = page

    def get(self) -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("Cache-Control", "no-store")
        self.set_header("Content-Security-Policy", DASHBOARD_CSP)
        self.set_header("X-Content-Type-Options", "nosniff")
        self.finish(self.page().encode("utf-8"))


class MetricsListener:
    def __init__(self, metrics: RelayMetrics, page: Callable[[], str] | None = None) -> None:
        routes: list[tuple[str, type[RequestHandler], dict[str, object]]] = [
            (r"/metrics", MetricsHandler, {"metrics": metrics})
        ]
        if page is not None:
            routes.append((r"/", DashboardHandler, {"page": page}))
        app = Application(routes)
        self._server = HTTPServer(app, xheaders=False)
        self.port: int | None = None

    def adopt(self, sockets: list[socket.socket]) -> int:
        """Serve on sockets bound on loopback by relay.app.listeners."""
        self._server.add_sockets(sockets)
        self.port = int(sockets[0].getsockname()[1])
        return self.port

    async def close(self) -> None:
        self._server.stop()
        await self._server.close_all_connections()
