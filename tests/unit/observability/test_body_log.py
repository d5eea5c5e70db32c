"""relay.observability.body_log: each bound holds (artifact size, write timeout, outstanding writes), a
failure disables only its writer, and nothing is written through a symlink or outside the
directory. Writes blocked on purpose wait on a threading.Event, never on time."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import stat
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.clock import ManualClock
from relay.errors import ConfigError
from relay.observability.body_log import (
    ARTIFACT_LIMIT,
    KINDS,
    MAX_OUTSTANDING,
    TRUNCATION_MARKER,
    BodyLog,
    BodyWriter,
    check_name,
    write_file,
)
from tests.support.tmpfs import size_limited_tmpfs


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


async def settled(body_log: BodyLog) -> None:
    """Every write has returned and landed (10 s at most: a hung test fails, not hangs)."""
    try:
        async with asyncio.timeout(10):
            await body_log.idle()
    except TimeoutError:
        raise AssertionError("the body log writes never landed") from None


class Gate:
    """A write function that blocks every call until :meth:`open` (then writes for real)."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.calls: list[str] = []
        self.started = threading.Semaphore(0)

    def __call__(self, dir_fd: int, name: str, data: bytes, create: bool) -> None:
        self.calls.append(name)
        self.started.release()
        if not self.released.wait(timeout=30):
            raise TimeoutError("the test never opened the gate")
        write_file(dir_fd, name, data, create)

    def open(self) -> None:
        self.released.set()


@pytest.fixture
def gate() -> Iterator[Gate]:
    gate = Gate()
    yield gate
    gate.open()  # however the test ended, no pool thread stays blocked


def bodies_dir(tmp_path: Path) -> Path:
    return tmp_path / "data" / "bodies"


def open_log(tmp_path: Path, clock: ManualClock | None = None, **options: Any) -> BodyLog:
    return BodyLog.open(bodies_dir(tmp_path), clock or ManualClock(), **options)


def artifact(tmp_path: Path, writer: BodyWriter) -> bytes:
    return (bodies_dir(tmp_path) / writer.name).read_bytes()


# --- writing ----------------------------------------------------------------------------


def test_appends_land_in_order_in_private_files(tmp_path: Path) -> None:
    async def go() -> None:
        body_log = open_log(tmp_path)
        writer = body_log.for_request("req_1").writer("client-response")
        chunks = [f"data: {i}\n\n".encode() for i in range(200)]
        for chunk in chunks:  # most arrive while a write is in flight: they are coalesced
            writer.append(chunk)
        await settled(body_log)
        assert artifact(tmp_path, writer) == b"".join(chunks)
        assert writer.state == "open" and body_log.failures == 0
        path = bodies_dir(tmp_path) / writer.name
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(bodies_dir(tmp_path).stat().st_mode) == 0o700
        body_log.close()

    run(go())


def test_artifact_names_carry_the_time_request_and_kind(tmp_path: Path) -> None:
    clock = ManualClock(wall=1_767_225_600.0)
    body_log = open_log(tmp_path, clock)
    bodies = body_log.for_request("req_abc")
    bodies.writer("client-request.json")
    clock.advance(5)  # one request's files share its start time
    assert [bodies.writer(kind).name for kind in KINDS] == [
        "20260101T000000Z-req_abc-client-request.json",
        "20260101T000000Z-req_abc-upstream-request.json",
        "20260101T000000Z-req_abc-upstream-response",
        "20260101T000000Z-req_abc-client-response",
    ]
    assert bodies.writer("client-response") is bodies.writer("client-response")
    body_log.close()


@pytest.mark.parametrize(
    ("sizes", "kept", "marked"),
    [
        ([100], 100, False),  # exactly the limit: complete, no marker
        ([101], 100, True),
        ([60, 40], 100, False),
        ([60, 41, 5], 100, True),  # the rest after the marker is not taken
        ([250], 100, True),
    ],
)
def test_an_artifact_keeps_the_limit_then_a_marker(
    tmp_path: Path, sizes: list[int], kept: int, marked: bool
) -> None:
    async def go() -> None:
        body_log = open_log(tmp_path, limit=100)
        writer = body_log.for_request("req_1").writer("client-request.json")
        data = [bytes([65 + i]) * size for i, size in enumerate(sizes)]
        for chunk in data:
            writer.append(chunk)
        await settled(body_log)
        expected = b"".join(data)[:kept] + (TRUNCATION_MARKER if marked else b"")
        assert artifact(tmp_path, writer) == expected
        assert writer.state == ("truncated" if marked else "open")
        assert body_log.failures == 0  # truncation is not a failure
        body_log.close()

    run(go())


def test_the_default_limit_is_8_mib(tmp_path: Path) -> None:
    async def go() -> None:
        body_log = open_log(tmp_path)
        writer = body_log.for_request("req_1").writer("upstream-request.json")
        writer.append(b"x" * (ARTIFACT_LIMIT + 1))
        await settled(body_log)
        written = artifact(tmp_path, writer)
        assert ARTIFACT_LIMIT == 8 * 1024 * 1024
        assert written == b"x" * ARTIFACT_LIMIT + TRUNCATION_MARKER
        body_log.close()

    run(go())


# --- the write timeout and the outstanding limit ------------------------------------------


def test_a_blocked_write_times_out_on_the_injected_clock_and_disables_its_writer(
    tmp_path: Path, gate: Gate, caplog: pytest.LogCaptureFixture
) -> None:
    async def go() -> None:
        clock = ManualClock()
        body_log = open_log(tmp_path, clock, write=gate, write_timeout_s=0.01)
        writer = body_log.for_request("req_1").writer("client-response")
        other = body_log.for_request("req_2").writer("client-response")
        timed_out = asyncio.Event()
        disable = writer._disable

        def disabled(reason: str) -> None:
            disable(reason)
            timed_out.set()

        writer._disable = disabled  # type: ignore[method-assign]
        writer.append(b"secret body")
        await asyncio.to_thread(gate.started.acquire)  # the write is blocked in its thread
        # Wake-ups come and go (they sleep on the loop), but the injected clock has not
        # moved: the write may still finish.
        for _ in range(3):
            await asyncio.sleep(0.02)
        assert writer.state == "open"
        clock.advance(0.01)
        await timed_out.wait()
        assert body_log.outstanding == 1  # its thread is still blocked: it still counts
        writer.append(b"more")  # a disabled writer takes nothing: no retry, no queue
        gate.open()
        await settled(body_log)
        assert gate.calls == [writer.name]
        other.append(b"fine")  # only that writer was disabled
        await settled(body_log)
        assert artifact(tmp_path, other) == b"fine"
        body_log.close()

    with caplog.at_level(logging.WARNING, logger="relay"):
        run(go())
    [warning] = [r.getMessage() for r in caplog.records if "body_log_failed" in r.getMessage()]
    assert warning == "body_log_failed request_id=req_1 artifact=client-response reason=timeout"


def test_at_most_four_writes_are_outstanding_and_the_fifth_is_refused_not_queued(
    tmp_path: Path, gate: Gate, caplog: pytest.LogCaptureFixture
) -> None:
    async def go() -> None:
        body_log = open_log(tmp_path, write=gate)
        writers = [body_log.for_request(f"req_{i}").writer("client-request.json") for i in range(6)]
        for writer in writers[:MAX_OUTSTANDING]:
            writer.append(b"body")
        assert body_log.outstanding == MAX_OUTSTANDING == 4
        writers[4].append(b"body")  # refused at once: nothing waits, nothing is queued
        assert writers[4].state == "disabled"
        assert body_log.outstanding == 4
        gate.open()
        await settled(body_log)
        writers[5].append(b"body")  # a slot is free again
        await settled(body_log)
        assert sorted(gate.calls) == sorted(w.name for w in writers if w is not writers[4])
        assert not (bodies_dir(tmp_path) / writers[4].name).exists()
        body_log.close()

    with caplog.at_level(logging.WARNING, logger="relay"):
        run(go())
    assert "artifact=client-request.json reason=busy" in caplog.text


def test_a_write_error_disables_the_writer_with_a_code_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def failing(dir_fd: int, name: str, data: bytes, create: bool) -> None:
        raise OSError(errno.EIO, f"I/O error writing {name}: {data!r}")

    async def go() -> None:
        body_log = open_log(tmp_path, write=failing)
        writer = body_log.for_request("req_1").writer("upstream-response")
        writer.append(b"sk-secret-in-a-body")
        await settled(body_log)
        assert writer.state == "disabled" and body_log.failures == 1
        body_log.close()

    with caplog.at_level(logging.WARNING, logger="relay"):
        run(go())
    assert "body_log_failed request_id=req_1 artifact=upstream-response reason=EIO" in caplog.text
    assert "sk-secret" not in caplog.text and str(tmp_path) not in caplog.text


# --- the directory and file names ----------------------------------------------------------


def test_the_directory_is_created_or_tightened_to_0700(tmp_path: Path) -> None:
    path = bodies_dir(tmp_path)
    path.mkdir(parents=True, mode=0o755)
    path.chmod(0o755)
    open_log(tmp_path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o700


def test_a_symlinked_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    bodies_dir(tmp_path).parent.mkdir()
    bodies_dir(tmp_path).symlink_to(real)
    with pytest.raises(ConfigError, match="is a symlink or not a directory"):
        open_log(tmp_path)


def test_dot_dot_after_a_symlink_is_refused_and_nothing_is_touched(tmp_path: Path) -> None:
    """``<symlink>/..`` names the parent of the link's target, not of the link."""
    target_parent = tmp_path / "victim"
    (target_parent / "target").mkdir(parents=True)
    target_parent.chmod(0o755)
    (tmp_path / "link").symlink_to(target_parent / "target")
    for path in (tmp_path / "link" / "..", tmp_path / "link" / "x" / ".." / ".."):
        with pytest.raises(ConfigError, match=r"'\.\.' follows the symlink .*link"):
            BodyLog.open(path, ManualClock())
    assert stat.S_IMODE(target_parent.stat().st_mode) == 0o755
    assert sorted(os.listdir(target_parent)) == ["target"]
    assert not (tmp_path / "link" / "x").exists()


@pytest.mark.parametrize(
    ("relative", "lands_in"),
    [
        ("own-link/bodies", "real/bodies"),  # a symlink of this user's own is followed
        ("real/sub/../bodies", "real/bodies"),  # a plain '..' is fine
        ("own-link/sub/../bodies", "real/bodies"),  # '..' after a real directory
        ("new/deeper/../bodies", "new/bodies"),  # not there yet: made
    ],
)
def test_paths_without_a_crossing_dot_dot_are_used(
    tmp_path: Path, relative: str, lands_in: str
) -> None:
    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "own-link").symlink_to(tmp_path / "real")
    BodyLog.open(tmp_path / relative, ManualClock()).close()
    made = tmp_path / lands_in
    assert made.is_dir() and not made.is_symlink()
    assert stat.S_IMODE(made.stat().st_mode) == 0o700


def test_a_relative_path_is_checked_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="follows the symlink"):
        BodyLog.open(Path("link/.."), ManualClock())
    BodyLog.open(Path("link/bodies"), ManualClock()).close()
    assert (tmp_path / "real" / "bodies").is_dir()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown the symlink")
def test_another_users_symlink_in_the_path_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "theirs").symlink_to(tmp_path / "real")
    os.lchown(tmp_path / "theirs", 65534, 65534)
    with pytest.raises(ConfigError, match=r"theirs is a symlink of uid 65534"):
        BodyLog.open(tmp_path / "theirs" / "bodies", ManualClock())
    assert not (tmp_path / "real" / "bodies").exists()
    os.lchown(tmp_path / "theirs", 0, 0)  # root's own (like /var/run) is trusted
    BodyLog.open(tmp_path / "theirs" / "bodies", ManualClock()).close()


def test_a_file_in_place_of_the_directory_is_refused(tmp_path: Path) -> None:
    bodies_dir(tmp_path).parent.mkdir()
    bodies_dir(tmp_path).write_text("x")
    with pytest.raises(ConfigError, match="RELAY_LOG_BODIES_DIR"):
        open_log(tmp_path)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown the directory")
def test_another_users_directory_is_refused(tmp_path: Path) -> None:
    path = bodies_dir(tmp_path)
    path.mkdir(parents=True, mode=0o700)
    os.chown(path, 65534, 65534)
    with pytest.raises(ConfigError, match="belongs to uid 65534"):
        open_log(tmp_path)


def test_a_symlink_planted_at_an_artifact_name_is_not_followed(tmp_path: Path) -> None:
    async def go() -> None:
        body_log = open_log(tmp_path, ManualClock())
        writer = body_log.for_request("req_1").writer("client-request.json")
        target = tmp_path / "target"
        target.write_bytes(b"untouched")
        (bodies_dir(tmp_path) / writer.name).symlink_to(target)
        writer.append(b"body")
        await settled(body_log)
        assert writer.state == "disabled"
        assert target.read_bytes() == b"untouched"
        body_log.close()

    run(go())


def test_a_later_write_does_not_follow_a_symlink_swapped_in(tmp_path: Path) -> None:
    body_log = open_log(tmp_path)
    target = tmp_path / "target"
    target.write_bytes(b"untouched")
    write_file(body_log.dir_fd, "a", b"first", True)
    (bodies_dir(tmp_path) / "a").unlink()
    (bodies_dir(tmp_path) / "a").symlink_to(target)
    with pytest.raises(OSError, match="Too many levels of symbolic links") as caught:
        write_file(body_log.dir_fd, "a", b"second", False)
    assert caught.value.errno == errno.ELOOP
    assert target.read_bytes() == b"untouched"
    body_log.close()


def test_files_are_written_relative_to_the_directory_descriptor(tmp_path: Path) -> None:
    """Renaming the directory after start does not redirect writes: the fd is what counts."""

    async def go() -> None:
        body_log = open_log(tmp_path)
        moved = tmp_path / "moved"
        bodies_dir(tmp_path).rename(moved)
        bodies_dir(tmp_path).mkdir()
        writer = body_log.for_request("req_1").writer("client-request.json")
        writer.append(b"body")
        await settled(body_log)
        assert (moved / writer.name).read_bytes() == b"body"
        assert list(bodies_dir(tmp_path).iterdir()) == []
        body_log.close()

    run(go())


@pytest.mark.parametrize("name", ["../x", "a/b", ".hidden", "", "a\x00b", "x" * 200, "/etc/x"])
def test_names_that_could_escape_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="not a body log file name"):
        check_name(name)


def test_only_known_artifact_kinds_exist(tmp_path: Path) -> None:
    body_log = open_log(tmp_path)
    with pytest.raises(ValueError, match="unknown body log artifact"):
        body_log.for_request("req_1").writer("../../etc/passwd")
    with pytest.raises(ValueError, match="not a body log file name"):
        body_log.for_request("../req")
    body_log.close()


# --- a full disk -----------------------------------------------------------------------------


@pytest.fixture
def small_tmpfs() -> Iterator[Path]:
    """A 64 KiB tmpfs at ``<base>/data``; the base is returned, to stand for ``tmp_path``."""
    with size_limited_tmpfs(64 * 1024) as volume:
        yield volume.target.parent


def test_a_full_disk_disables_the_writer_and_keeps_what_fit(
    small_tmpfs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tmp_path = small_tmpfs

    async def go() -> None:
        body_log = open_log(tmp_path)
        writer = body_log.for_request("req_1").writer("upstream-response")
        writer.append(b"y" * (1024 * 1024))
        await settled(body_log)
        assert writer.state == "disabled"
        kept = artifact(tmp_path, writer)
        assert 0 < len(kept) <= 64 * 1024 and set(kept) == {ord("y")}
        small = body_log.for_request("req_2").writer("client-request.json")
        (bodies_dir(tmp_path) / writer.name).unlink()  # space again: others still work
        small.append(b"fits")
        await settled(body_log)
        assert artifact(tmp_path, small) == b"fits"
        body_log.close()

    with caplog.at_level(logging.WARNING, logger="relay"):
        run(go())
    assert "artifact=upstream-response reason=ENOSPC" in caplog.text


def test_closing_waits_for_running_writes_before_releasing_the_directory(
    tmp_path: Path, gate: Gate, caplog: pytest.LogCaptureFixture
) -> None:
    async def go() -> None:
        body_log = open_log(tmp_path, write=gate)
        writer = body_log.for_request("req_1").writer("client-response")
        writer.append(b"first")
        await asyncio.to_thread(gate.started.acquire)
        body_log.close()
        assert body_log.dir_fd >= 0  # a write is running with it
        writer.append(b"later")  # buffered (one write in flight), then abandoned
        gate.open()
        await settled(body_log)
        assert body_log.dir_fd == -1
        assert artifact(tmp_path, writer) == b"first"
        other = body_log.for_request("req_2").writer("client-response")
        other.append(b"after close")  # refused, never written
        assert other.state == "disabled"

    with caplog.at_level(logging.WARNING, logger="relay"):
        run(go())
    assert caplog.text.count("reason=closed") == 2
