"""The command line's side of the admin socket: one request, its answer (blocking)."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

READ_TIMEOUT_S: Final = 300.0  # a snapshot of 256 MiB, its VACUUM and fsync included
MAX_LINE_BYTES: Final = 64 * 1024 * 1024


class AdminUnavailable(Exception):
    """No relay answers on the socket; the message says what to check."""


def request(
    path: Path,
    command: str,
    *,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    timeout_s: float = READ_TIMEOUT_S,
) -> dict[str, Any]:
    """Send ``command``; the final answer (``{"ok": ...}``). Progress lines go to
    ``on_progress``. Raises :class:`AdminUnavailable`."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            raise AdminUnavailable(
                f"no relay answers on {path}: is it running with RELAY_ADMIN_SOCKET={path}?"
            ) from None
        except PermissionError:
            raise AdminUnavailable(f"{path}: permission denied (another user's relay?)") from None
        except OSError as exc:
            raise AdminUnavailable(f"cannot connect to {path}: {exc.strerror or exc}") from None
        sock.sendall(json.dumps({"command": command}).encode() + b"\n")
        reader = sock.makefile("rb")
        while True:
            try:
                line = reader.readline(MAX_LINE_BYTES)
            except TimeoutError:
                raise AdminUnavailable(f"the relay on {path} did not answer in time") from None
            if not line:
                raise AdminUnavailable(f"the relay on {path} closed the connection early")
            message = json.loads(line)
            if "progress" in message and "ok" not in message:
                if on_progress is not None:
                    on_progress(message["progress"])
                continue
            return dict(message)
    finally:
        sock.close()
