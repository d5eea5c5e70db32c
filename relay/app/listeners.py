"""Every listener ``relay serve`` opens -- the relay's port, ``/metrics``, the admin socket
-- bound first, before the store is opened or the token written: a port in use then
stops startup having changed nothing on disk, with one line naming the address and the
setting (``127.0.0.1:8787 is in use (RELAY_PORT)``)."""

from __future__ import annotations

import contextlib
import errno
import socket
from dataclasses import dataclass, field
from pathlib import Path

from tornado.netutil import bind_unix_socket

from relay.errors import ConfigError, ListenError
from relay.ops.admin_socket import MAX_PATH_BYTES, private_socket_path
from relay.settings.config import Config

BACKLOG = 128  # Tornado's
METRICS_HOST = "127.0.0.1"  # /metrics is on loopback only (relay.ops.metrics_http)


@dataclass
class Listeners:
    relay: list[socket.socket]
    metrics: list[socket.socket] | None = None
    admin: socket.socket | None = None
    admin_path: Path | None = None
    # Why the default admin socket is off (its path is too long), for the banner.
    admin_note: str | None = None
    _open: list[socket.socket] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.relay[0].getsockname()[1])

    def close(self) -> None:
        """Close what no server adopted (after a failed start)."""
        for sock in self._open:
            with contextlib.suppress(OSError):
                sock.close()
        if self.admin_path is not None:
            with contextlib.suppress(OSError):
                self.admin_path.unlink()


def address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_sockets(port: int, host: str) -> list[socket.socket]:
    """Tornado's ``bind_sockets`` (every address of ``host``; with port 0, the port the
    first one got), except that a failure closes what it opened instead of leaking it."""
    bound: list[socket.socket] = []
    try:
        infos = socket.getaddrinfo(
            host or None, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE
        )
        for family, kind, proto, _name, addr in sorted(set(infos), key=lambda i: i[0]):
            sock = socket.socket(family, kind, proto)
            bound.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(bound) > 1:  # the port the first address got, for all
                where = (addr[0], bound[0].getsockname()[1], *addr[2:])
            else:
                where = addr
            sock.setblocking(False)
            sock.bind(where)
            sock.listen(BACKLOG)
    except BaseException:
        for sock in bound:
            sock.close()
        raise
    return bound


def bind_tcp(host: str, port: int, setting: str) -> list[socket.socket]:
    """:func:`bind_sockets` with a failure that names the address and ``setting``."""
    try:
        return bind_sockets(port, host)
    except OSError as exc:
        where = address(host, port)
        if exc.errno == errno.EADDRINUSE:
            raise ListenError(f"{where} is in use ({setting})") from None
        if exc.errno == errno.EACCES:
            raise ListenError(
                f"{where}: permission denied ({setting}; ports below 1024 need privileges)"
            ) from None
        if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
            raise ListenError(f"{where}: this host has no such address (RELAY_HOST)") from None
        raise ListenError(f"cannot listen on {where} ({setting}): {exc.strerror or exc}") from None


def bind_listeners(config: Config) -> Listeners:
    """Bind every configured listener, or none (raises ListenError / ConfigError)."""
    bound = Listeners(relay=[])
    try:
        bound.relay = bind_tcp(config.host, config.port, "RELAY_PORT")
        bound._open += bound.relay
        if config.metrics_port is not None:
            bound.metrics = bind_tcp(METRICS_HOST, config.metrics_port, "RELAY_METRICS_PORT")
            bound._open += bound.metrics
        if config.admin_socket is not None:
            _bind_admin(config, bound)
    except BaseException:
        bound.close()
        raise
    return bound


def _bind_admin(config: Config, bound: Listeners) -> None:
    path = config.admin_socket
    assert path is not None
    default = path == config.default_admin_socket
    if default and len(bytes(path)) > MAX_PATH_BYTES:
        # A long data directory must not stop the relay: the socket is a convenience here.
        bound.admin_note = (
            f"admin socket: off ({path} is longer than a Unix socket path may be; set "
            "RELAY_ADMIN_SOCKET to a shorter path)"
        )
        return
    try:
        path = private_socket_path(path)
    except ConfigError as err:
        if default and "another relay answers" in str(err):
            raise ListenError(
                f"another relay answers on {path} (RELAY_ADMIN_SOCKET): is a relay already "
                f"running with the data directory {config.data_dir}?"
            ) from None
        raise
    try:
        sock = bind_unix_socket(str(path), mode=0o600)
    except OSError as exc:
        raise ListenError(
            f"cannot listen on {path} (RELAY_ADMIN_SOCKET): {exc.strerror or exc}"
        ) from None
    bound.admin, bound.admin_path = sock, path
    bound._open.append(sock)
