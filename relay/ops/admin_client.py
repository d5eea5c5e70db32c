"""The command line's side of the admin socket: one request, its answer (blocking).

It trusts nothing that answers on the path: the socket's directory must be this user's
and closed to others (as the server requires), the peer must run as this user (its
kernel credentials: ``SO_PEERCRED`` on Linux, ``LOCAL_PEERCRED`` on macOS/BSD), every
answer must arrive within the deadline as a JSON object on one line, and every string in
it is made printable (:func:`scrub`, by the commands) before anything shows it: a peer
cannot move the terminal's cursor, recolour it or forge lines.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from relay.clock import Clock, SystemClock
from relay.errors import OperatorError

TIMEOUT_S: Final = 10.0  # connect and each answer; ``--timeout`` changes it
SNAPSHOT_TIMEOUT_S: Final = 300.0  # between a snapshot's lines (its VACUUM and fsync included)
MAX_LINE_BYTES: Final = 64 * 1024 * 1024
_PEERCRED_LINUX: Final = "3i"  # struct ucred: pid, uid, gid
_XUCRED_HEAD: Final = "II"  # struct xucred: cr_version, cr_uid, ...
_BSDS: Final = ("darwin", "freebsd")
_SOL_LOCAL: Final = 0  # macOS/BSD: the level of LOCAL_PEERCRED


class AdminUnavailable(OperatorError):
    """No relay answers on the socket, or what answers is not to be trusted; the message
    (one line) says what to check."""


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with control and format characters (ANSI escapes, bidi overrides, CR,
    and newlines unless kept) written as ``\\xNN``/``\\uNNNN`` escapes."""
    out = []
    for char in text:
        if keep_newlines and char == "\n":
            out.append(char)
        elif _unprintable(char):
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


def _unprintable(char: str) -> bool:
    code = ord(char)
    return (
        code < 0x20
        or 0x7F <= code < 0xA0
        or 0x200B <= code <= 0x200F
        or 0x202A <= code <= 0x202E
        or 0x2066 <= code <= 0x2069
        or code in (0x2028, 0x2029, 0xFEFF)
    )


def scrub(value: Any, *, keep_newlines: bool = False) -> Any:
    """Every string (keys too) of a parsed answer made printable."""
    if isinstance(value, str):
        return printable(value, keep_newlines=keep_newlines)
    if isinstance(value, list):
        return [scrub(v, keep_newlines=keep_newlines) for v in value]
    if isinstance(value, dict):
        return {printable(str(k)): scrub(v, keep_newlines=keep_newlines) for k, v in value.items()}
    return value


def check_directory(path: Path) -> None:
    """The socket's directory must be this user's and closed to others: anyone who can
    write there could put their own socket in the relay's place."""
    directory = path.parent
    try:
        info = os.stat(directory)
    except FileNotFoundError:
        raise AdminUnavailable(
            f"no relay answers on {path}: {directory} does not exist (is the relay running "
            "with this data directory?)"
        ) from None
    except OSError as exc:
        raise AdminUnavailable(f"cannot check {directory}: {exc.strerror or exc}") from None
    me = os.geteuid()
    if info.st_uid != me:  # root too: a socket another user planted must not answer root
        raise AdminUnavailable(
            f"{directory} belongs to uid {info.st_uid}, not to this user: not asking a "
            "socket someone else controls"
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise AdminUnavailable(
            f"{directory} is open to others (mode {mode:o}): not asking a socket another "
            "user could have replaced (chmod 700 it)"
        )


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end, from the kernel; ``None`` where the
    platform has no way to ask (the directory check still applies)."""
    if hasattr(socket, "SO_PEERCRED"):  # Linux
        size = struct.calcsize(_PEERCRED_LINUX)
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, size)
        return int(struct.unpack(_PEERCRED_LINUX, raw)[1])
    # macOS and FreeBSD: getpeereid(3) reads LOCAL_PEERCRED (1 on both; older Pythons
    # do not name it).
    option = getattr(socket, "LOCAL_PEERCRED", 1 if sys.platform.startswith(_BSDS) else None)
    if option is not None:
        raw = sock.getsockopt(_SOL_LOCAL, option, 256)
        return int(struct.unpack_from(_XUCRED_HEAD, raw)[1])
    return None


def request(
    path: Path,
    command: str,
    *,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    timeout_s: float = TIMEOUT_S,
    clock: Clock | None = None,
) -> dict[str, Any]:
    """Send ``command``; the final answer (``{"ok": ...}``), a JSON object as sent: show
    nothing of it without :func:`scrub`.
    Progress lines go to ``on_progress`` (each one renews the deadline). Raises
    :class:`AdminUnavailable` with one line."""
    clock = clock or SystemClock()
    check_directory(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            raise AdminUnavailable(
                f"no relay answers on {path}: is it running (with this data directory, "
                "or RELAY_ADMIN_SOCKET / --socket naming this path)?"
            ) from None
        except PermissionError:
            raise AdminUnavailable(f"{path}: permission denied (another user's relay?)") from None
        except TimeoutError:
            raise AdminUnavailable(f"{path}: connecting timed out after {timeout_s:g} s") from None
        except OSError as exc:
            raise AdminUnavailable(f"cannot connect to {path}: {exc.strerror or exc}") from None
        uid = peer_uid(sock)
        if uid is not None and uid != os.geteuid():
            raise AdminUnavailable(
                f"{path} is served by uid {uid}, not by this user: not trusting its answer"
            )
        sock.sendall(json.dumps({"command": command}).encode() + b"\n")
        lines = _Lines(sock, clock, timeout_s, path)
        while True:
            message = _decode(lines.next(), path)
            if "progress" in message and "ok" not in message:
                if on_progress is not None and isinstance(message["progress"], dict):
                    on_progress(message["progress"])
                continue
            return message
    except OSError as exc:
        raise AdminUnavailable(f"{path}: {exc.strerror or exc}") from None
    finally:
        sock.close()


def _decode(line: bytes, path: Path) -> dict[str, Any]:
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        message = None
    if not isinstance(message, dict):
        raise AdminUnavailable(
            f"the answer on {path} is not the relay's (not a JSON object): is something "
            "else listening there?"
        )
    return message


class _Lines:
    """Answer lines within a deadline that each line renews (a silent or trickling peer
    ends the wait after ``timeout_s``)."""

    def __init__(self, sock: socket.socket, clock: Clock, timeout_s: float, path: Path):
        self._sock, self._clock, self._timeout_s, self._path = sock, clock, timeout_s, path
        self._buffer = bytearray()

    def next(self) -> bytes:
        deadline = self._clock.monotonic() + self._timeout_s
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                return line
            if len(self._buffer) > MAX_LINE_BYTES:
                raise AdminUnavailable(f"the answer on {self._path} is too long to be the relay's")
            left = deadline - self._clock.monotonic()
            if left <= 0:
                raise self._late()
            self._sock.settimeout(left)
            try:
                chunk = self._sock.recv(1024 * 1024)
            except TimeoutError:
                raise self._late() from None
            if not chunk:
                raise AdminUnavailable(f"the relay on {self._path} closed the connection early")
            self._buffer += chunk

    def _late(self) -> AdminUnavailable:
        return AdminUnavailable(
            f"the relay on {self._path} did not answer within {self._timeout_s:g} s "
            "(--timeout to wait longer)"
        )
