"""``RELAY_METRICS_PORT``: ``GET /metrics`` on a listener of its own, bound to 127.0.0.1.

Never on the relay's public port (a tunnel exposes that one); no token, because only local
processes can reach loopback. Anything but ``GET /metrics`` is a 404.
"""

from __future__ import annotations

import socket

from tornado.httpserver import HTTPServer
from tornado.web import Application, RequestHandler

from relay.ops.metrics import RelayMetrics

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class MetricsHandler(RequestHandler):
    def initialize(self, metrics: RelayMetrics) -> None:
        self.metrics = metrics

    def get(self) -> None:
        self.set_header("Content-Type", CONTENT_TYPE)
        self.set_header("Cache-Control", "no-store")
        self.finish(self.metrics.render())


class MetricsListener:
    def __init__(self, metrics: RelayMetrics) -> None:
        app = Application([(r"/metrics", MetricsHandler, {"metrics": metrics})])
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
