"""Connection exhaustion over real sockets: the header deadline (RELAY_HEADER_TIMEOUT_MS),
the connection cap (RELAY_MAX_CONNECTIONS) and the accept back-off when the process is out
of file descriptors; last, ``relay serve`` under a lowered fd limit, flooded with more
half-sent heads than the limit, stays answerable, quiet in its log and cheap in CPU."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.log_leaks import observe_process
from tests.support.raw_http import converse, read_answers
from tests.support.relay_cli import relay_env, serving
from tests.support.stack import StackFactory

PARTIAL_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: relay\r\nContent-Type: applic"
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n"


def connect(port: int, data: bytes = b"", timeout: float = 10) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if data:
        sock.sendall(data)
    return sock


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the relay closes ``sock`` (EOF or reset) before the socket's timeout, having
    sent nothing."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def read_all(sock: socket.socket) -> bytes:
    """All the relay sends until it closes ``sock``; TimeoutError if it does not."""
    received = b""
    with contextlib.suppress(ConnectionResetError):  # a reset after the answer
        while chunk := sock.recv(65536):
            received += chunk
    return received


def healthz(port: int) -> int:
    """The status of GET /healthz on a new connection (0: none came)."""
    answers = read_answers(converse(port, HEALTHZ, answer_due=True))
    return answers[0].status if answers else 0


@pytest.mark.parametrize("sent", [PARTIAL_HEAD, b""], ids=["half a head", "nothing"])
def test_a_head_not_whole_within_the_header_deadline_is_closed(
    stack_factory: StackFactory,
    sent: bytes,
) -> None:
    # The idle timeout stays at its default (15 minutes): the header deadline closes it.
    with (
        stack_factory({"RELAY_HEADER_TIMEOUT_MS": "200"}) as s,
        connect(s.port, sent) as sock,
    ):
        assert closed_by_peer(sock)


def test_a_kept_alive_connection_waits_past_the_header_deadline(
    stack_factory: StackFactory,
) -> None:
    """Between requests a connection waits up to the idle timeout; only a begun head has
    the header deadline."""
    with stack_factory({"RELAY_HEADER_TIMEOUT_MS": "200"}) as s:
        port = s.port
        with connect(port) as kept:
            kept.sendall(HEALTHZ)
            assert read_answers(kept.recv(65536))[0].status == 200
            # The deadline has passed for the kept connection once it closes this one,
            # opened after it.
            with connect(port, PARTIAL_HEAD) as witness:
                assert closed_by_peer(witness)
            kept.sendall(HEALTHZ)
            assert read_answers(kept.recv(65536))[0].status == 200
            kept.sendall(PARTIAL_HEAD)  # begun: now the header deadline holds
            assert closed_by_peer(kept)


def test_connections_over_the_cap_get_503_without_being_read(
    stack_factory: StackFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with stack_factory({"RELAY_MAX_CONNECTIONS": "3"}) as s:
        port = s.port
        held = [connect(port, PARTIAL_HEAD) for _ in range(3)]
        try:
            # Each accepted connection is counted as it is accepted: the fourth waits for
            # no head to be read.
            refusals = []
            for _ in range(3):
                with connect(port) as over:
                    refusals.append(read_answers(read_all(over)))
            for answers in refusals:
                [answer] = answers
                assert answer.status == 503
                assert answer.header("connection") == "close"
                assert answer.header("retry-after") == "1"
                error = json.loads(answer.body)["error"]
                assert error["code"] == "too_many_connections"
                assert "RELAY_MAX_CONNECTIONS" in error["message"]
        finally:
            for sock in held:
                sock.close()
        # Room again once one closes (the relay notices the close on its own loop).
        deadline = time.monotonic() + 10
        while (status := healthz(port)) != 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert status == 200
    refused = [r for r in caplog.records if "connections_refused" in r.getMessage()]
    assert len(refused) == 1, [r.getMessage() for r in refused]  # one line a minute at most


# --- relay serve at its fd limit --------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far (/proc/<pid>/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@contextlib.contextmanager
def flood(port: int, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections, each holding half a request head."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.settimeout(10)
            sock.connect(("127.0.0.1", port))
            with contextlib.suppress(OSError):  # refused over the cap already
                sock.sendall(PARTIAL_HEAD)
            socks.append(sock)
        yield socks
    finally:
        for sock in socks:
            sock.close()


def lower_fd_limit(limit: int) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))


FD_LIMIT = 256  # relay serve's: its default RELAY_MAX_CONNECTIONS is 256 - 128 = 128
HEADER_MS = 1000


@pytest.mark.parametrize("exhaust", ["cap", "emfile"])
def test_relay_serve_at_its_fd_limit_stays_answerable_quiet_and_cheap(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], exhaust: str
) -> None:
    """``cap``: started under ``ulimit -n 256``, the default cap (128) keeps descriptors
    free and refuses the rest with 503. ``emfile``: then the soft limit is lowered under
    the running relay to 50 descriptors more than it has open, so accept fails with
    EMFILE and pauses with back-off. Either way the flood (more connections than the fd
    limit, each half a head) is closed by the header deadline, /healthz answers 200
    within a few deadlines, the log has a few lines, and the relay's CPU time stays a
    small part of the wall time (Tornado alone: a busy accept loop, one ERROR line each
    turn, and half-sent heads held for the 15 minute idle timeout)."""
    env = relay_env(tmp_path, RELAY_HEADER_TIMEOUT_MS=str(HEADER_MS))
    with serving(
        env, "test_connection_limits", preexec_fn=lambda: lower_fd_limit(FD_LIMIT)
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        banner = proc.stdout.readline()
        port = int(banner.split("http://127.0.0.1:")[1].split("/")[0])
        assert healthz(port) == 200
        count = FD_LIMIT + 44  # 300: more connections than the fd limit
        if exhaust == "emfile":
            limit = open_fds(proc.pid) + 50
            resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (limit, FD_LIMIT))
            count = limit + 60  # within the listen backlog (128) past what it can accept
        cpu_before, started = cpu_seconds(proc.pid), time.monotonic()
        with flood(port, count) as socks:
            opened = time.monotonic()
            while (status := healthz(port)) != 200 and time.monotonic() - opened < 30:
                time.sleep(0.05)
            answered = time.monotonic() - opened
            # Every one is closed by the relay: refused over the cap (503, nothing read),
            # or held until the header deadline and closed without an answer.
            refused = sum(bool(read_answers(read_all(sock))) for sock in socks)
        cpu = cpu_seconds(proc.pid) - cpu_before
        wall = time.monotonic() - started
        proc.terminate()
        out, err = proc.communicate(timeout=30)
        observe_process("test_connection_limits", banner + out + err, env)
    lines = err.splitlines()
    with capsys.disabled():
        print(
            f"\nfd exhaustion ({exhaust}): {count} connections with half a head against "
            f"ulimit -n {FD_LIMIT if exhaust == 'cap' else limit}; /healthz 200 after "
            f"{answered:.2f} s (header deadline {HEADER_MS / 1000:.1f} s); {refused} refused "
            f"with 503, the rest closed at the deadline; relay CPU "
            f"{cpu:.2f} s in {wall:.2f} s wall ({cpu / wall:.0%}); {len(lines)} log lines"
        )
    assert status == 200, f"/healthz never answered 200 in {answered:.1f} s"
    assert answered < 10 * HEADER_MS / 1000
    assert cpu / wall < 0.5, (cpu, wall)
    assert len(lines) < 20, err[-3000:]
    assert not [line for line in lines if " ERROR " in line], err[-3000:]
    assert (refused > 0) == (exhaust == "cap"), refused
    event = "connections_refused" if exhaust == "cap" else "accept_paused"
    assert sum(event in line for line in lines) == 1, err[-3000:]
