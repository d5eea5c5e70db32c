"""relay.storage.portable.full_fsync: macOS's F_FULLFSYNC where fcntl has it, else fsync."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

import pytest

from relay.storage import portable

F_FULLFSYNC = 51  # macOS <sys/fcntl.h>


@pytest.mark.parametrize(
    ("has_full", "fails_with", "called"),
    [
        (True, None, ["fcntl"]),  # macOS: the drive's cache is flushed, fsync is not needed
        (True, errno.ENOTSUP, ["fcntl", "fsync"]),  # a file system without it
        (True, errno.EINVAL, ["fcntl", "fsync"]),
        (False, None, ["fsync"]),  # Linux and the rest
    ],
)
def test_the_strongest_flush_the_platform_offers(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    has_full: bool,
    fails_with: int | None,
    called: list[str],
) -> None:
    monkeypatch.setattr(portable, "FORCE_FALLBACKS", False)
    if has_full:
        monkeypatch.setattr(fcntl, "F_FULLFSYNC", F_FULLFSYNC, raising=False)
    else:
        monkeypatch.delattr(fcntl, "F_FULLFSYNC", raising=False)
    calls: list[str] = []

    def fake_fcntl(fd: int, cmd: int, *args: object) -> int:
        assert cmd == F_FULLFSYNC and not args
        calls.append("fcntl")
        if fails_with is not None:
            raise OSError(fails_with, os.strerror(fails_with))
        return 0

    real_fsync = os.fsync

    def fake_fsync(fd: int) -> None:
        calls.append("fsync")
        real_fsync(fd)

    monkeypatch.setattr(fcntl, "fcntl", fake_fcntl)
    monkeypatch.setattr(os, "fsync", fake_fsync)
    fd = os.open(tmp_path / "f", os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        portable.full_fsync(fd)
    finally:
        os.close(fd)
    assert calls == called


def test_a_failing_full_flush_is_an_error_not_a_silent_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(portable, "FORCE_FALLBACKS", False)
    monkeypatch.setattr(fcntl, "F_FULLFSYNC", F_FULLFSYNC, raising=False)

    def broken(fd: int, cmd: int, *args: object) -> int:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(fcntl, "fcntl", broken)
    fd = os.open(tmp_path / "f", os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        with pytest.raises(OSError) as raised:
            portable.full_fsync(fd)
    finally:
        os.close(fd)
    assert raised.value.errno == errno.EIO


def test_forced_fallbacks_use_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(portable, "FORCE_FALLBACKS", True)
    monkeypatch.setattr(fcntl, "F_FULLFSYNC", F_FULLFSYNC, raising=False)
    monkeypatch.setattr(
        fcntl, "fcntl", lambda *a: pytest.fail("F_FULLFSYNC under forced fallbacks")
    )
    fd = os.open(tmp_path / "f", os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        portable.full_fsync(fd)
    finally:
        os.close(fd)
