"""``relay status`` / ``relay admin`` against something else on the socket path: a fake
server on a real Unix socket answers garbage, terminal escapes or nothing, runs as another
user, or sits in a directory others could write. Each is one line on stderr and exit 1;
nothing the server sends reaches the terminal unescaped (relay.ops.admin_client)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast

import pytest

from relay.app.cli import main
from relay.ops import admin_client

ESC = "\x1b"
NOBODY = 65534


@pytest.fixture
def private() -> Iterator[Path]:
    """A short private directory (a Unix socket path has at most 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="relay-client-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@contextmanager
def fake_server(path: Path, answer: bytes | None) -> Iterator[list[bytes]]:
    """Listens on ``path``; each client gets ``answer`` after its request line (``None``:
    nothing, the connection held open until the test ends). Yields the lines received."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()
    received: list[bytes] = []
    done = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            conn, _ = listener.accept()
            if done.is_set():  # the wake-up connection below
                conn.close()
                return
            held.append(conn)
            received.append(conn.makefile("rb").readline())
            if answer is not None:
                with contextlib.suppress(OSError):  # a client that refused us hung up
                    conn.sendall(answer)
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield received
    finally:
        done.set()
        for conn in held:
            conn.close()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as wake:
            wake.connect(str(path))  # ends the accept() the thread waits in
        thread.join(10)
        listener.close()
        path.unlink()


def status(sock: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main([*args, "--socket", str(sock)]) if args else main(["status", "--socket", str(sock)])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 400 Bad Request\r\n\r\n",
    b"[1, 2]\n",
    b"\xff\xfe\n",
    b"[" * 100_000 + b"\n",
])  # fmt: skip
def test_an_answer_that_is_not_the_relays_is_one_line(
    private: Path, capsys: pytest.CaptureFixture[str], answer: bytes
) -> None:
    sock = private / "admin.sock"
    with fake_server(sock, answer) as received:
        code, out, err = status(sock, capsys)
    assert code == 1 and out == ""
    assert one_line(err) == (
        f"relay status: the answer on {sock} is not the relay's (not a JSON object): is "
        "something else listening there?"
    )
    assert received == [b'{"command": "status"}\n']


def test_an_object_without_the_status_fields_is_one_line(
    private: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sock = private / "admin.sock"
    with fake_server(sock, b'{"ok": true, "relay": 5}\n'):
        code, _out, err = status(sock, capsys)
    assert code == 1
    assert "lacks what the relay sends" in one_line(err)


def test_a_silent_peer_is_given_up_on_after_the_deadline(
    private: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sock = private / "admin.sock"
    with fake_server(sock, None):
        code, _out, err = status(sock, capsys, "status", "--timeout", "0.2")
    assert code == 1
    assert one_line(err) == (
        f"relay status: the relay on {sock} did not answer within 0.2 s (--timeout to wait longer)"
    )
    assert admin_client.TIMEOUT_S == 10.0  # the default, not the old 300 s


def test_escapes_from_the_server_are_never_printed_raw(
    private: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sock = private / "admin.sock"
    hostile = f"{ESC}]0;owned{ESC}\\{ESC}[2J\r\u202eevil\nforged line"
    refusal = {"ok": False, "error": {"code": f"{ESC}[31mx", "message": hostile}}
    with fake_server(sock, json.dumps(refusal).encode() + b"\n"):
        code, out, err = status(sock, capsys)
    assert code == 1 and out == ""
    line = one_line(err)
    assert ESC not in line and "\r" not in line and "\u202e" not in line
    assert "\\x1b]0;owned\\x1b\\\\x1b[2J\\x0d\\u202eevil\\x0aforged line" in line
    metrics = {"ok": True, "text": f"a 1\n{ESC}[2Jb 2\n"}
    with fake_server(sock, json.dumps(metrics).encode() + b"\n"):
        code, out, err = status(sock, capsys, "admin", "metrics")
    assert code == 0 and out == "a 1\n\\x1b[2Jb 2\n"  # its lines kept, its escapes not
    document = {"ok": True, "relay": {"upstream": f"{ESC}[8mhidden"}}
    with fake_server(sock, json.dumps(document).encode() + b"\n"):
        code, out, err = status(sock, capsys, "admin", "status")
    assert code == 0 and ESC not in out and "\\\\x1b[8mhidden" in out


def test_a_directory_others_can_write_is_not_trusted(
    private: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shared = private / "open"
    shared.mkdir()
    shared.chmod(0o777)
    sock = shared / "admin.sock"
    with fake_server(sock, b'{"ok": true}\n') as received:
        code, _out, err = status(sock, capsys)
    assert code == 1 and received == []  # refused before connecting
    assert one_line(err) == (
        f"relay status: {shared} is open to others (mode 777): not asking a socket another "
        "user could have replaced (chmod 700 it)"
    )


def test_a_directory_of_another_user_is_not_trusted(
    private: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (to give the directory to another user)")
    theirs = private / "theirs"
    theirs.mkdir(mode=0o700)
    sock = theirs / "admin.sock"
    with fake_server(sock, b'{"ok": true}\n') as received:
        os.chown(theirs, NOBODY, NOBODY)
        code, _out, err = status(sock, capsys)
    assert code == 1 and received == []
    assert f"{theirs} belongs to uid {NOBODY}, not to this user" in one_line(err)


def test_a_peer_of_another_uid_is_not_trusted(
    private: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the kernel reports it (faked here; the next test has a real other user)."""
    sock = private / "admin.sock"
    monkeypatch.setattr(admin_client, "peer_uid", lambda _sock: os.geteuid() + 1)
    with fake_server(sock, b'{"ok": true}\n') as received:
        code, _out, err = status(sock, capsys)
    assert code == 1
    assert one_line(err) == (
        f"relay status: {sock} is served by uid {os.geteuid() + 1}, not by this user: not "
        "trusting its answer"
    )
    assert received in ([], [b""])  # nothing was sent to it


SERVE_AS_NOBODY = """
import os, socket, sys
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=int(sys.argv[1]))
listener.listen()  # the peer's credentials are the listener's at listen()
print("ready", flush=True)
conn, _ = listener.accept()
conn.sendall(b'{"ok": true, "text": "x"}\\n')
conn.recv(100)
"""


def test_a_real_peer_of_another_user_is_not_trusted(
    private: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    python = Path("/usr/bin/python3")
    if os.geteuid() != 0 or not python.exists() or not hasattr(socket, "SO_PEERCRED"):
        pytest.skip("needs root (to run as another user), /usr/bin/python3 and SO_PEERCRED")
    sock = private / "admin.sock"
    bound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound.bind(str(sock))  # in our private directory: only the listener is theirs
    with subprocess.Popen(
        [str(python), "-c", SERVE_AS_NOBODY, str(bound.fileno())],
        pass_fds=[bound.fileno()], user=NOBODY, group=NOBODY, extra_groups=[],
        stdout=subprocess.PIPE, text=True, cwd="/",
    ) as server:  # fmt: skip
        try:
            assert server.stdout is not None and server.stdout.readline() == "ready\n"
            code, out, err = status(sock, capsys, "admin", "metrics")
        finally:
            server.kill()
            bound.close()
    assert code == 1 and out == ""
    assert f"is served by uid {NOBODY}, not by this user" in one_line(err)


class XucredSocket:
    """A socket as macOS shows it: no SO_PEERCRED, the peer in a ``struct xucred``."""

    def __init__(self, uid: int) -> None:
        self.uid = uid
        self.asked: list[tuple[int, int, int]] = []

    def getsockopt(self, level: int, option: int, size: int) -> bytes:
        self.asked.append((level, option, size))
        return struct.pack("II", 0, self.uid) + bytes(size - 8)  # cr_version, cr_uid, ...


def test_the_peer_uid_on_macos(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(socket, "SO_PEERCRED", raising=False)
    monkeypatch.delattr(socket, "LOCAL_PEERCRED", raising=False)
    monkeypatch.setattr(sys, "platform", "darwin")
    fake = XucredSocket(501)
    assert admin_client.peer_uid(cast(socket.socket, fake)) == 501
    assert fake.asked == [(0, 1, 256)]  # SOL_LOCAL, LOCAL_PEERCRED
    monkeypatch.setattr(sys, "platform", "sunos5")  # no way to ask: the directory check alone
    assert admin_client.peer_uid(cast(socket.socket, fake)) is None
