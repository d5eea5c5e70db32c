"""Network faults: fake-upstream scripts with toxics, and client-side misbehaviour.

Upstream side (toxiproxy style, carried out by the fake; see fakeupstream.toxics):
latency, slicer (split SSE lines across reads), cut after N bytes or events, connection
reset, hang, malformed and oversized events, a missing final blank line.

Client side (carried out by :class:`scenarios.client.RelayConnection`): a slow reader
(:func:`slow_read`), a stalled reader (:func:`stall_until_blocked`) and a mid-stream
disconnect (:func:`disconnect_after`).

The builders validate keys here, so a typo fails in the scenario, not as a 400 from the
fake in the middle of a run.
"""

from __future__ import annotations

import fcntl
import struct
import termios
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from fakeupstream.toxics import Toxics
from scenarios.answer import ChatAnswer
from scenarios.client import RelayConnection
from scenarios.wait import wait_until

# The fake validates a script too; checking here names the step that is wrong.
TOXIC_KEYS = frozenset(f.name for f in fields(Toxics))


def toxics(**values: Any) -> dict[str, Any]:
    unknown = set(values) - TOXIC_KEYS
    if unknown:
        raise ValueError(f"unknown toxics {sorted(unknown)}; known: {sorted(TOXIC_KEYS)}")
    return dict(values)


def reply(
    text: str | None = None,
    *,
    reasoning: list[str] | None = None,
    calls: list[tuple[str, str]] | None = None,
    refusal: str | None = None,
    more_messages: list[str] | None = None,
    status: str | None = None,
    deltas: int | None = None,
    **toxic_values: Any,
) -> dict[str, Any]:
    """One scripted upstream answer: optional reasoning summary, text, tool calls, refusal,
    plus any toxics as keyword arguments (``reply("hi", cut_after_events=4)``)."""
    output: list[dict[str, Any]] = []
    if reasoning is not None:
        output.append({"type": "reasoning", "summary": reasoning})
    if text is not None:
        output.append({"type": "message", "text": text})
    for extra in more_messages or []:  # several message items; the client sees one text
        output.append({"type": "message", "text": extra})
    if refusal is not None:
        output.append({"type": "refusal", "text": refusal})
    for name, arguments in calls or []:
        output.append({"type": "function_call", "name": name, "arguments": arguments})
    script: dict[str, Any] = {"output": output}
    if status is not None:
        script["status"] = status
    if deltas is not None:
        script["deltas"] = deltas
    if toxic_values:
        script["toxics"] = toxics(**toxic_values)
    return script


def default_reply(**toxic_values: Any) -> dict[str, Any]:
    """The fake's default reply (echo + continuity line), under toxics."""
    return {"toxics": toxics(**toxic_values)} if toxic_values else {}


def http_error(status: int, message: str, type_: str = "server_error") -> dict[str, Any]:
    return {"http_error": {"status": status, "message": message, "type": type_}}


def error_event(
    message: str, code: str = "server_error", after_events: int | None = None
) -> dict[str, Any]:
    event: dict[str, Any] = {"message": message, "code": code}
    if after_events is not None:
        event["after_events"] = after_events
    return {"error_event": event}


# --- client side ----------------------------------------------------------------------------


def slow_read(
    conn: RelayConnection, bytes_per_read: int, pause_s: float, timeout: float
) -> ChatAnswer:
    return conn.read_slowly(bytes_per_read, pause_s, timeout)


def unread_bytes(conn: RelayConnection) -> int:
    """Bytes the kernel holds for us that we have not read (FIONREAD)."""
    raw = fcntl.ioctl(conn.sock.fileno(), termios.FIONREAD, struct.pack("i", 0))
    return int(struct.unpack("i", raw)[0])


def stall_until_blocked(conn: RelayConnection, timeout: float = 30.0, settle_s: float = 0.1) -> int:
    """Stop reading until the relay can send no more: our receive queue stops growing.

    Returns the bytes queued. "Stopped growing" is observed, not assumed: the queue size
    must stay unchanged for ``settle_s`` (polled), which on loopback means the relay's
    writes are blocked on our full window. The timeout only bounds a failure: 5 s was
    outlasted on a loaded 2-core machine, the relay still filling the window.
    """
    state = {"size": -1, "since": time.monotonic()}

    def probe() -> int | None:
        size = unread_bytes(conn)
        now = time.monotonic()
        if size != state["size"]:
            state["size"], state["since"] = size, now
            return None
        return size if size > 0 and now - state["since"] >= settle_s else None

    return wait_until(probe, timeout=timeout, what="the client's receive window to fill")


@dataclass(frozen=True)
class TcpSocket:
    local_port: int
    remote_port: int
    state: str  # hex TCP state from /proc/net/tcp: "01" ESTABLISHED
    tx_queue: int  # bytes written by the owner, not yet acknowledged by the peer
    rx_queue: int  # bytes received, not yet read by the owner


def tcp_sockets() -> list[TcpSocket]:
    """Every IPv4/IPv6 TCP socket of this network namespace, with its queue sizes.

    Reading the kernel's queues shows who is not reading without asking either process
    (and without making a busy process busier).
    """
    found: list[TcpSocket] = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            tx, rx = (int(part, 16) for part in fields[4].split(":"))
            found.append(
                TcpSocket(
                    int(fields[1].rsplit(":", 1)[1], 16),
                    int(fields[2].rsplit(":", 1)[1], 16),
                    fields[3],
                    tx,
                    rx,
                )
            )
    return found


def server_send_queue(port: int) -> int | None:
    """Bytes stuck in the send queue of the established server-side socket on ``port``
    (e.g. the fake's connection to the relay); None if there is none."""
    queues = [s.tx_queue for s in tcp_sockets() if s.local_port == port and s.state == "01"]
    return max(queues) if queues else None


def disconnect_after(conn: RelayConnection, frames: int, *, reset: bool = True) -> ChatAnswer:
    """Read ``frames`` data frames, then leave (RST by default, like a killed client)."""
    conn.read_frames(frames)
    return conn.disconnect(reset=reset)
