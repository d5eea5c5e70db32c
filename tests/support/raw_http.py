"""HTTP/1.1 over a raw socket: send bytes no HTTP client would, read what comes back."""

from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass, field


@dataclass
class Answer:
    status: int
    headers: dict[str, list[str]] = field(default_factory=dict)
    body: bytes = b""
    until_close: bool = False  # no framing: the body is whatever came before the close

    def header(self, name: str) -> str | None:
        values = self.headers.get(name.lower())
        return values[-1] if values else None


class ProtocolViolation(AssertionError):
    """The server's answer is not well-formed HTTP/1.1."""


def read_answers(data: bytes, *, head_only: bool = False) -> list[Answer]:
    """Every answer in ``data`` (all a connection sent), in order. Bodies are framed by
    Content-Length (the relay's error answers always carry one) or chunked; answers to
    HEAD (``head_only``) and 1xx answers have none."""
    answers: list[Answer] = []
    rest = data
    while rest:
        head, sep, rest = rest.partition(b"\r\n\r\n")
        if not sep:
            raise ProtocolViolation(f"an answer without the end of its head: {head[:200]!r}")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ProtocolViolation(f"not a status line: {lines[0][:200]!r}")
        answer = Answer(int(parts[1]))
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon:
                raise ProtocolViolation(f"not a header line: {line[:200]!r}")
            answer.headers.setdefault(name.strip().lower(), []).append(value.strip())
        length = answer.header("content-length")
        if 100 <= answer.status < 200:
            pass
        elif head_only:
            # No body, except that a refusal the server writes before it knows the method
            # carries its envelope, and then the connection closes.
            if rest and not rest.startswith(b"HTTP/1."):
                answer.body, rest = rest, b""
        elif length is not None:
            answer.body, rest = rest[: int(length)], rest[int(length) :]
            if len(answer.body) < int(length):
                raise ProtocolViolation("an answer shorter than its Content-Length")
        elif (answer.header("transfer-encoding") or "").lower() == "chunked":
            answer.body, rest = _dechunk(rest)
        elif answer.status not in (204, 304):
            answer.body, rest, answer.until_close = rest, b"", True
        answers.append(answer)
    return answers


def _dechunk(data: bytes) -> tuple[bytes, bytes]:
    body = b""
    while True:
        line, sep, data = data.partition(b"\r\n")
        if not sep:
            raise ProtocolViolation("a chunked answer cut short")
        size = int(line.split(b";")[0], 16)
        if size == 0:
            _, _, data = data.partition(b"\r\n")
            return body, data
        body, data = body + data[:size], data[size + 2 :]


def exchange(port: int, data: bytes, *, timeout: float = 10.0) -> bytes:
    """Send ``data`` on a new connection and read until the server closes it, or until
    ``timeout`` passes with nothing more (a kept-alive connection: everything due came).
    Never half-closes: Tornado takes that for a client that left."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        with contextlib.suppress(OSError):  # the server may answer and close before the end
            sock.sendall(data)
        received = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            except OSError:  # reset after the answer: what came before it still counts
                break
            if not chunk:
                break
            received += chunk
        return received


def converse(
    port: int, data: bytes, *, answer_due: bool, head_only: bool = False, timeout: float = 10.0
) -> bytes:
    """Send ``data`` and read what comes back: until the server closes, or once a final
    answer is complete and the connection stays open (keep-alive: nothing more is due).
    When no answer is due (the request never ends), stop after a moment instead."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        with contextlib.suppress(OSError):  # the server may answer and close before the end
            sock.sendall(data)
        sock.settimeout(timeout if answer_due else 0.01)
        received = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except OSError:  # a timeout, or a reset after the answer
                return received
            if not chunk:
                return received
            received += chunk
            try:
                answers = read_answers(received, head_only=head_only)
            except (ProtocolViolation, ValueError):
                continue  # not complete yet
            final = [a for a in answers if a.status >= 200]
            if not final or final[-1].until_close:
                continue
            if (final[-1].header("connection") or "").lower() != "close":
                return received
