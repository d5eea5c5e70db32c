"""The tunnel supervisor over a real child process: the stand-in in tests/support."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from relay.clock import Clock, ManualClock, SystemClock
from relay.settings.config import Config
from relay.settings.providers import Provider
from relay.settings.tunnel_command import TunnelCommand
from relay.tunnel.supervisor import (
    LINES_PER_INTERVAL,
    MAX_URLS,
    Tunnel,
    child_environment,
    describe_status,
    secret_values,
)
from scenarios.wait import wait_until
from tests.support import fake_tunnel
from tests.support.processes import running, wait_gone

T = TypeVar("T")
LOCAL = "http://127.0.0.1:8787/v1"
AUTHTOKEN = "2AbCdEfGhIjKlMnOpQrStUvWx_test"
RELAY_TOKEN = "relay-token-0123456789abcdef"


class Console:
    """What the tunnel announces, awaitable line by line."""

    def __init__(self) -> None:
        self.said: list[str] = []
        self._changed = asyncio.Event()

    def __call__(self, text: str) -> None:
        self.said.append(text)
        self._changed.set()

    async def wait_for(self, needle: str) -> str:
        async def find() -> str:
            while True:
                for text in self.said:
                    if needle in text:
                        return text
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(find(), 30)

    @property
    def text(self) -> str:
        return "\n".join(self.said)


def stand_in(state: Path, *args: str) -> TunnelCommand:
    return TunnelCommand(
        (sys.executable, fake_tunnel.__file__, "--port", "{port}", "--state", str(state), *args)
    )


STARTED: list[Tunnel] = []
OUTSIDE: list[int] = []  # processes a stand-in started outside its group


@pytest.fixture(autouse=True)
def _no_leftovers() -> Iterator[None]:
    """A failed test must not leave a stand-in (or its grandchildren) running."""
    yield
    while STARTED:
        pid = STARTED.pop().pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    while OUTSIDE:
        with contextlib.suppress(ProcessLookupError):
            os.kill(OUTSIDE.pop(), signal.SIGKILL)


def tunnel(
    command: TunnelCommand, console: Console, clock: Clock | None = None, **kwargs: float
) -> Tunnel:
    env = {**os.environ, "NGROK_AUTHTOKEN": AUTHTOKEN}
    started = Tunnel(
        command,
        clock=clock or SystemClock(),
        port=8787,
        local_url=LOCAL,
        token_hint="the relay token stored in data/relay-token",
        env=env,
        secrets=[RELAY_TOKEN, None],
        announce=console,
        **kwargs,
    )
    STARTED.append(started)
    return started


def run(test: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(test())


@pytest.mark.parametrize("style", ["ngrok", "ngrok-json", "cloudflared"])
def test_the_url_is_announced_with_the_cursor_settings_and_stop_is_clean(
    tmp_path: Path, style: str
) -> None:
    async def scenario() -> None:
        console = Console()
        t = tunnel(stand_in(tmp_path, "--style", style), console)
        assert await t.start()
        url = fake_tunnel.DEFAULT_URLS[style]
        said = await console.wait_for("tunnel: public URL")
        assert said.splitlines() == [
            f"tunnel: public URL {url} (from {Path(sys.executable).name}, pid {t.pid})",
            "  In Cursor > Settings > Models:",
            f"    Override OpenAI Base URL: {url}/v1",
            "    OpenAI API Key: the relay token stored in data/relay-token",
        ]
        assert t.url == url
        assert (tmp_path / "port").read_text() == "8787"
        assert int((tmp_path / "pid").read_text()) == t.pid
        await t.stop()
        assert t.returncode == 0 and not t.forced
        assert t.pid is not None and not running(t.pid)
        assert "exited" not in console.text  # a stop is not reported as a death

    run(scenario)


def test_a_tunnel_ignoring_sigterm_is_killed_with_its_group(tmp_path: Path) -> None:
    async def scenario() -> None:
        console = Console()
        command = stand_in(tmp_path, "--style", "ngrok", "--ignore-sigterm", "--grandchild")
        t = tunnel(command, console, stop_grace_s=0.5)
        assert await t.start()
        await console.wait_for("tunnel: public URL")
        grandchild = int((tmp_path / "grandchild").read_text())
        assert running(grandchild)
        await t.stop()
        assert t.forced
        assert t.returncode == -signal.SIGKILL
        assert t.pid is not None and not running(t.pid)
        assert await asyncio.to_thread(wait_gone, grandchild, 10)

    run(scenario)


def test_a_grandchild_is_stopped_with_the_tunnel_too(tmp_path: Path) -> None:
    async def scenario() -> None:
        console = Console()
        t = tunnel(stand_in(tmp_path, "--style", "cloudflared", "--grandchild"), console)
        assert await t.start()
        await console.wait_for("tunnel: public URL")
        grandchild = int((tmp_path / "grandchild").read_text())
        await t.stop()
        assert t.returncode == 0 and not t.forced
        assert await asyncio.to_thread(wait_gone, grandchild, 10)

    run(scenario)


@pytest.mark.parametrize("style", ["ngrok", "cloudflared"])
def test_a_dying_tunnel_is_reported_with_sanitized_output(tmp_path: Path, style: str) -> None:
    async def scenario() -> None:
        console = Console()
        command = stand_in(
            tmp_path,
            *("--style", style, "--leak-env", "NGROK_AUTHTOKEN", "--exit-code", "7"),
            "--grandchild",  # left behind by the dying program: killed with its group
        )
        t = tunnel(command, console)
        assert await t.start()
        await console.wait_for("tunnel: public URL")
        assert t.pid is not None
        os.kill(t.pid, signal.SIGUSR1)
        report = await console.wait_for("exited with status 7")
        await asyncio.wait_for(t.exited.wait(), 10)
        url = fake_tunnel.DEFAULT_URLS[style]
        first, *rest = report.splitlines()
        assert first == (
            f"tunnel: {Path(sys.executable).name} (pid {t.pid}) exited with status 7 and is not "
            f"restarted; the relay keeps serving locally at {LOCAL}; {url} no longer reaches it"
        )
        assert rest[0] == "tunnel: its last output (sanitized):"
        assert 1 <= len(rest[1:]) <= 5 and all(line.startswith("  | ") for line in rest[1:])
        assert "ERR" in rest[-1]  # the death lines themselves are there ...
        assert "[redacted]" in report  # ... with the token taken out
        assert AUTHTOKEN not in console.text
        assert t.returncode == 7
        grandchild = int((tmp_path / "grandchild").read_text())
        assert await asyncio.to_thread(wait_gone, grandchild, 10)
        await t.stop()  # after a death: nothing left to stop, and no second report
        assert console.text.count("exited with status") == 1

    run(scenario)


def test_a_program_that_cannot_run_is_reported_and_nothing_else_happens(tmp_path: Path) -> None:
    program = tmp_path / "tunnel-program"
    program.write_text("#!/bin/sh\n")  # executable bit missing: exec fails

    async def scenario() -> None:
        console = Console()
        t = tunnel(TunnelCommand((str(program), "{port}")), console)
        assert not await t.start()
        assert console.said == [
            f"tunnel: cannot start tunnel-program: Permission denied; the relay keeps serving "
            f"locally at {LOCAL}"
        ]
        assert t.exited.is_set() and t.pid is None
        await t.stop()

    run(scenario)


def test_no_url_in_the_output_is_said_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        console = Console()
        t = tunnel(stand_in(tmp_path, "--style", "silent"), console, url_wait_s=0.2)
        assert await t.start()
        said = await console.wait_for("has reported no public https URL")
        assert said.endswith(f"(ngrok needs --log stdout); the relay is serving locally at {LOCAL}")
        # Silent, it says nothing once it is up: its pid file (written once it awaits
        # SIGTERM) is the sign. The notice comes 0.2 s after the start, which a loaded
        # machine's Python start-up may outlast; a SIGTERM before then kills it (-15).
        await asyncio.to_thread(
            wait_until, (tmp_path / "pid").exists, timeout=30, what="the stand-in's pid file"
        )
        await t.stop()
        assert t.url is None and t.returncode == 0

    run(scenario)


def test_the_tunnel_gets_none_of_the_relays_settings_or_keys() -> None:
    environ = {
        "PATH": "/bin",
        "HOME": "/root",
        "NGROK_AUTHTOKEN": AUTHTOKEN,
        "RELAY_TOKEN": RELAY_TOKEN,
        "RELAY_TUNNEL_CMD": "ngrok",
        "OPENAI_API_KEY": "sk-openai",
        "DEEPSEEK_API_KEY": "sk-deepseek",
        "SHORT_KEY": "abc",
    }
    deepseek = Provider(
        "deepseek",
        "chat",
        "https://api.deepseek.com",
        "sk-deepseek",
        api_key_env="DEEPSEEK_API_KEY",
    )
    env = child_environment(environ, Config(providers={"deepseek": deepseek}))
    assert env == {
        "PATH": "/bin",
        "HOME": "/root",
        "NGROK_AUTHTOKEN": AUTHTOKEN,
        "SHORT_KEY": "abc",
    }
    assert secret_values(env) == [AUTHTOKEN]  # redacted from shown output


def test_exit_statuses_read_like_sentences() -> None:
    assert describe_status(0) == "exited with status 0"
    assert describe_status(3) == "exited with status 3"
    assert describe_status(-signal.SIGKILL) == "was killed by SIGKILL"
    assert describe_status(-200) == "was killed by signal 200"


def test_a_repeated_url_is_said_once_and_a_new_one_again(tmp_path: Path) -> None:
    script = (
        "import signal\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"
        "for host in ('a', 'a', 'b'):\n"
        "    print(f'Forwarding https://{host}.example.com -> http://localhost:8787')\n"
        "print('done', flush=True)\n"
        "signal.sigwait({signal.SIGTERM})\n"
    )

    async def scenario() -> None:
        console = Console()
        t = tunnel(TunnelCommand((sys.executable, "-c", script)), console)
        assert await t.start()
        said = await console.wait_for("public URL changed to")
        assert said.splitlines()[0].startswith(
            "tunnel: public URL changed to https://b.example.com"
        )
        assert "    Override OpenAI Base URL: https://b.example.com/v1" in said
        assert console.text.count("tunnel: public URL https://a.example.com") == 1
        assert t.url == "https://b.example.com"
        await t.stop()
        assert t.returncode == 0

    run(scenario)


def test_descendants_that_left_its_group_are_stopped_with_the_tunnel(tmp_path: Path) -> None:
    """A setsid grandchild (found by ancestry: its environment is empty) and a daemon
    whose parent exited (found by the mark in its environment) go with the tunnel."""

    async def scenario() -> None:
        console = Console()
        command = stand_in(tmp_path, "--style", "ngrok", "--setsid-grandchild", "--daemon")
        t = tunnel(command, console)
        assert await t.start()
        await console.wait_for("tunnel: public URL")
        left = [int((tmp_path / name).read_text()) for name in ("setsid-grandchild", "daemon")]
        OUTSIDE.extend(left)
        assert t.pid is not None
        for pid in left:
            assert running(pid)
            assert os.getpgid(pid) != t.pid  # out of the group: the group kill misses them
        await t.stop()
        assert t.returncode == 0
        for pid in left:
            assert await asyncio.to_thread(wait_gone, pid, 10)

    run(scenario)


def test_a_daemon_left_by_a_dying_tunnel_is_stopped(tmp_path: Path) -> None:
    async def scenario() -> None:
        console = Console()
        t = tunnel(stand_in(tmp_path, "--style", "cloudflared", "--daemon"), console)
        assert await t.start()
        await console.wait_for("tunnel: public URL")
        daemon = int((tmp_path / "daemon").read_text())
        OUTSIDE.append(daemon)
        assert t.pid is not None
        os.kill(t.pid, signal.SIGUSR1)
        await asyncio.wait_for(t.exited.wait(), 10)
        assert await asyncio.to_thread(wait_gone, daemon, 10)

    run(scenario)


def test_a_deeply_nested_line_does_not_hide_the_url_read_with_it(tmp_path: Path) -> None:
    deep = '{"lvl": "info", "x": ' + "[" * 15_000
    script = (
        "import os, signal, sys\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"
        f"os.write(1, ({deep!r} + '\\nForwarding https://after.example.com\\n').encode())\n"
        "signal.sigwait({signal.SIGTERM})\n"
    )

    async def scenario() -> None:
        console = Console()
        t = tunnel(TunnelCommand((sys.executable, "-c", script)), console)
        assert await t.start()
        said = await console.wait_for("tunnel: public URL")
        assert said.splitlines()[0].startswith("tunnel: public URL https://after.example.com")
        await t.stop()

    run(scenario)


def test_a_program_printing_urls_in_a_loop_is_announced_a_bounded_number_of_times(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        console = Console()
        t = tunnel(stand_in(tmp_path, "--style", "ngrok", "--flood"), console)
        assert await t.start()
        await console.wait_for("tunnel: public URL")
        assert t.pid is not None
        os.kill(t.pid, signal.SIGUSR2)
        await console.wait_for("keeps reporting new public URLs")
        # The loop stays responsive meanwhile: a timer fires close to on time.
        lateness = []
        for _ in range(20):
            started = time.monotonic()
            await asyncio.sleep(0.01)
            lateness.append(time.monotonic() - started - 0.01)
        assert sorted(lateness)[10] < 0.05, lateness
        await t.stop()
        announced = [text for text in console.said if text.startswith("tunnel: public URL")]
        assert len(announced) == MAX_URLS  # the real one, then the first new flood hosts
        assert console.text.count("keeps reporting new public URLs") == 1
        assert t.returncode == -signal.SIGTERM

    run(scenario)


def test_output_is_read_at_a_bounded_pace_and_nothing_is_skipped(tmp_path: Path) -> None:
    """1.5 budgets of lines, then the URL: it takes a second interval of the (manual)
    clock to reach it, and it is announced then."""
    lines = 3 * LINES_PER_INTERVAL // 2
    script = (
        "import os, signal\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"
        f"os.write(1, b'lvl=info msg=noise\\n' * {lines})\n"
        "os.write(1, b'Forwarding https://after-the-noise.example.com\\n')\n"
        "signal.sigwait({signal.SIGTERM})\n"
    )

    async def scenario() -> None:
        console = Console()
        clock = ManualClock()
        t = tunnel(TunnelCommand((sys.executable, "-c", script)), console, clock)
        assert await t.start()
        intervals = 0
        while t.url is None:
            assert intervals < 10, "the URL was never reached"
            # A spent budget waits on a Deadline, which looks at the (manual) clock again
            # after the interval's length in real time: let that pass, then move on.
            await asyncio.sleep(1.2)
            if t.url is None:
                clock.advance(1.0)
                intervals += 1
        # At most 1000 lines an interval: 1000, then the last 500 and the URL.
        assert intervals >= 1
        assert t.url == "https://after-the-noise.example.com"
        await t.stop()

    run(scenario)
