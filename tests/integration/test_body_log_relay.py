"""LOG_BODIES=1 over the real relay: the four artifacts of a call hold exactly what passed,
and a model call succeeds, unslowed, while the body log fails or is blocked."""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from relay.errors import ConfigError
from relay.observability.body_log import BodyLog, write_file
from tests.support.stack import Stack, running_stack
from tests.support.tmpfs import size_limited_tmpfs

ON = {"LOG_BODIES": "1"}


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    with running_stack(tmp_path / "data", ON) as s:
        yield s


def body_log(stack: Stack) -> BodyLog:
    assert stack.relay.runtime is not None and stack.relay.runtime.body_log is not None
    return stack.relay.runtime.body_log


def chat(
    stack: Stack, *, stream: bool, text: str = "hello bodies"
) -> tuple[bytes, requests.Response]:
    body = json.dumps(
        {"model": "gpt-5", "stream": stream, "messages": [{"role": "user", "content": text}]}
    ).encode()
    answer = requests.post(
        stack.base_url + "/chat/completions", headers=stack.headers(), data=body, timeout=20
    )
    return body, answer


def answer_text(answer: requests.Response) -> str:
    if not answer.headers["Content-Type"].startswith("text/event-stream"):
        return str(answer.json()["choices"][0]["message"]["content"])
    frames = [f.removeprefix("data: ") for f in answer.text.split("\n\n") if f]
    assert frames[-1] == "[DONE]"
    chunks = [json.loads(frame)["choices"] for frame in frames[:-1]]
    return "".join(c[0]["delta"].get("content") or "" for c in chunks if c)


def artifacts(stack: Stack, request_id: str) -> dict[str, bytes]:
    directory = stack.config.bodies_dir
    stack.loop.run(body_log(stack).idle(), timeout=10)
    found = {}
    for path in directory.iterdir():
        _, _, rest = path.name.partition(f"-{request_id}-")
        if rest:
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            found[rest] = path.read_bytes()
    return found


@pytest.mark.parametrize("stream", [True, False])
def test_a_call_leaves_four_artifacts_of_exactly_what_passed(stack: Stack, stream: bool) -> None:
    sent, answer = chat(stack, stream=stream)
    assert answer.status_code == 200, answer.text
    found = artifacts(stack, answer.headers["x-request-id"])
    assert sorted(found) == [
        "client-request.json",
        "client-response",
        "upstream-request.json",
        "upstream-response",
    ]
    assert found["client-request.json"] == sent
    assert found["client-response"] == answer.content  # the bytes the client received
    upstream = json.loads(found["upstream-request.json"])
    assert upstream["model"] == "gpt-5" and "hello bodies" in json.dumps(upstream["input"])
    assert b"event: response.completed" in found["upstream-response"]
    assert stat.S_IMODE(stack.config.bodies_dir.stat().st_mode) == 0o700


def test_the_banner_warns_that_bodies_are_written(stack: Stack) -> None:
    [line] = [line for line in stack.relay.banner() if "LOG_BODIES" in line]
    assert line.startswith("WARNING: LOG_BODIES=1: request and response bodies")
    assert str(stack.config.bodies_dir) in line


def test_off_by_default_writes_nothing(tmp_path: Path) -> None:
    with running_stack(tmp_path / "data") as off:
        assert off.relay.runtime is not None and off.relay.runtime.body_log is None
        _, answer = chat(off, stream=True)
        assert answer.status_code == 200
        assert not (tmp_path / "data" / "bodies").exists()
        assert not any("LOG_BODIES" in line for line in off.relay.banner())


def test_a_dot_dot_after_a_symlink_stops_startup_and_touches_nothing(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    (victim / "target").mkdir(parents=True)
    victim.chmod(0o755)
    (tmp_path / "link").symlink_to(victim / "target")
    env = {**ON, "RELAY_LOG_BODIES_DIR": f"{tmp_path / 'link'}/.."}
    refused = pytest.raises(ConfigError, match=r"RELAY_LOG_BODIES_DIR\)?: '\.\.' follows the")
    with refused, running_stack(tmp_path / "data", env):
        pass
    assert stat.S_IMODE(victim.stat().st_mode) == 0o755  # not made 0700
    assert sorted(os.listdir(victim)) == ["target"]


def test_a_failing_body_log_never_fails_the_call(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    def full(dir_fd: int, name: str, data: bytes, create: bool) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    body_log(stack).write = full
    with caplog.at_level(logging.WARNING, logger="relay"):
        for stream in (True, False):
            _, answer = chat(stack, stream=stream)
            assert answer.status_code == 200, answer.text
            assert "Echo: hello bodies" in answer_text(answer)
        stack.loop.run(body_log(stack).idle(), timeout=10)
    failed = [r.getMessage() for r in caplog.records if "body_log_failed" in r.getMessage()]
    assert len(failed) == 8 and all("reason=ENOSPC" in line for line in failed), failed
    assert list(stack.config.bodies_dir.iterdir()) == []


def test_a_blocked_body_log_does_not_slow_the_call(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    released = threading.Event()

    def blocked(dir_fd: int, name: str, data: bytes, create: bool) -> None:
        released.wait(30)
        write_file(dir_fd, name, data, create)

    body_log(stack).write = blocked
    try:
        with caplog.at_level(logging.WARNING, logger="relay"):
            # Answered in full while the first call's four writes (one per artifact) are
            # blocked in their threads: the limit, so the second call's are refused.
            for stream in (True, False):
                _, answer = chat(stack, stream=stream)
                assert answer.status_code == 200
                assert "Echo: hello bodies" in answer_text(answer)
                assert body_log(stack).outstanding == 4
    finally:
        released.set()
    stack.loop.run(body_log(stack).idle(), timeout=10)
    busy = [r.getMessage() for r in caplog.records if "reason=busy" in r.getMessage()]
    assert len(busy) == 4, busy


@pytest.fixture
def full_tmpfs() -> Iterator[Path]:
    """A 64 KiB tmpfs with no space left, holding an empty ``bodies`` directory."""
    with size_limited_tmpfs(64 * 1024) as volume:
        (volume.target / "bodies").mkdir(mode=0o700)
        volume.fill()
        with pytest.raises(OSError, match="No space left") as caught:
            (volume.target / "probe").write_bytes(b"\0" * 4096)
        assert caught.value.errno == errno.ENOSPC
        yield volume.target / "bodies"


def test_a_full_disk_under_the_body_log_never_fails_the_call(
    tmp_path: Path, full_tmpfs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = {**ON, "RELAY_LOG_BODIES_DIR": str(full_tmpfs)}
    with (
        caplog.at_level(logging.WARNING, logger="relay"),
        running_stack(tmp_path / "data", env) as full,
    ):
        _, answer = chat(full, stream=True, text="x" * 20_000)
        assert answer.status_code == 200 and answer.text.endswith("data: [DONE]\n\n")
        full.loop.run(body_log(full).idle(), timeout=10)
    assert "reason=ENOSPC" in caplog.text
