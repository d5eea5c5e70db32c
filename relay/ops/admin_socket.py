"""``RELAY_ADMIN_SOCKET`` (default ``<data dir>/run/admin.sock``, bound early by
relay.app.listeners): the private Unix-domain listener (design §18).

Separate from the HTTP server, so nothing that reaches the relay's port (a tunnel, a LAN
client) can reach it. Access is the filesystem's: the socket's directory must be owned by
this user and closed to others (0700; created so when missing), the socket itself is 0600,
and a peer of another uid (root excepted) is refused by its SO_PEERCRED credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import struct
from pathlib import Path
from typing import Any, Final

from tornado.iostream import IOStream, StreamClosedError
from tornado.tcpserver import TCPServer

from relay.errors import ConfigError, InternalSignal
from relay.observability import log
from relay.ops.admin_protocol import MAX_REQUEST_BYTES, AdminService, encode, refusal

READ_TIMEOUT_S: Final = 5.0
MAX_PATH_BYTES: Final = 107  # sun_path, less its terminating NUL


def private_socket_path(path: Path) -> Path:
    """Check (or create) the socket's private directory; raises ``ConfigError``."""
    name = "RELAY_ADMIN_SOCKET"
    path = path.expanduser().absolute()
    if len(os.fsencode(path)) > MAX_PATH_BYTES:
        raise ConfigError(f"{name}={path}: longer than a Unix socket path may be (107 bytes)")
    directory = path.parent
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(directory)
    except OSError as exc:
        raise ConfigError(f"{name}: cannot create {directory}: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise ConfigError(f"{name}: {directory} must be a directory owned by this user")
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise ConfigError(
            f"{name}: {directory} is open to others (mode {stat.S_IMODE(info.st_mode):o}); "
            "put the socket in a private directory (chmod 700)"
        )
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise ConfigError(f"{name}: {path} exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            pass  # a stale socket from a relay that is gone: bind replaces it
        else:
            raise ConfigError(f"{name}: another relay answers on {path}")
        finally:
            probe.close()
    return path


def _peer_uid(stream: IOStream) -> int | None:
    sock = stream.socket
    if sock is None or not hasattr(socket, "SO_PEERCRED"):
        return None
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", raw)
    return int(uid)


class AdminSocket(TCPServer):
    def __init__(self, service: AdminService) -> None:
        super().__init__(max_buffer_size=64 * 1024)
        self.service = service
        self.path: Path | None = None
        self._clients: set[IOStream] = set()

    def adopt(self, sock: socket.socket, path: Path) -> None:
        """Serve on a socket bound by relay.app.listeners (before the store was opened)."""
        self.add_socket(sock)
        self.path = path

    def close(self) -> None:
        """Stop listening and drop connected clients (a running snapshot goes on: the
        server waits for it before closing the store)."""
        self.stop()
        for stream in list(self._clients):
            stream.close()
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()
            self.path = None

    async def handle_stream(self, stream: IOStream, address: Any) -> None:
        self._clients.add(stream)
        try:
            uid = _peer_uid(stream)
            if uid is not None and uid not in (os.geteuid(), 0):
                log.event("admin_refused", reason="other_user")
                await stream.write(encode(refusal("forbidden", "not this relay's user")))
                return
            line = await self._read_line(stream)
            if line is None:
                return

            def emit(message: dict[str, Any]) -> None:
                if not stream.closed():
                    stream.write(encode(message))

            answer = await self.service.handle(line, emit)
            log.event("admin_command", ok=answer.get("ok"))
            if not stream.closed():
                await stream.write(encode(answer))
        except StreamClosedError:
            pass  # the client left; a running snapshot carries on
        finally:
            self._clients.discard(stream)
            stream.close()

    async def _read_line(self, stream: IOStream) -> bytes | None:
        """The request line; ``None`` (after answering, when possible) otherwise.

        Read in pieces rather than with ``read_until(max_bytes=...)``, which closes the
        stream on an overlong line: a line over the limit is answered too, then dropped.
        """
        try:
            return await asyncio.wait_for(self._read_bounded(stream), READ_TIMEOUT_S)
        except TimeoutError:
            await stream.write(encode(refusal("timeout", "send the request line within 5 s")))
        except _Overlong:
            await stream.write(
                encode(refusal("too_large", f"a request line is at most {MAX_REQUEST_BYTES} bytes"))
            )
        except StreamClosedError:
            pass
        return None

    @staticmethod
    async def _read_bounded(stream: IOStream) -> bytes:
        line = bytearray()
        while True:
            room = MAX_REQUEST_BYTES - len(line)
            line += await stream.read_bytes(room + 1, partial=True)
            end = line.find(b"\n")
            if 0 <= end < MAX_REQUEST_BYTES:
                return bytes(line[: end + 1])
            if len(line) >= MAX_REQUEST_BYTES:
                raise _Overlong


class _Overlong(InternalSignal):
    """The request line did not end within :data:`MAX_REQUEST_BYTES`."""
