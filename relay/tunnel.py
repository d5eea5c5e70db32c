"""The tunnel program (``RELAY_TUNNEL_CMD``) as a supervised child of ``relay serve``.

It runs in its own session, hence its own process group: the terminal's Ctrl-C reaches
only the relay, which then stops the whole group itself (SIGTERM, then SIGKILL after a
grace period), so a tunnel cannot outlive a relay that shuts down, whether on SIGTERM,
SIGINT or a normal stop. A relay killed with SIGKILL cannot do this; its tunnel is left
running.

Its output (stdout and stderr, merged) is read line by line: the first public HTTPS URL
it reports is printed with the Cursor settings to paste, and the last few lines are kept,
sanitized, for the report if it dies. Output is never logged; logs get only the program
name, pid, the parsed URL and exit statuses.

A tunnel that dies is reported and not restarted. A restart would usually fail the same
way (a missing authtoken, an account limit) and, with quick tunnels, come back under a new
URL that the Cursor setting no longer names, so restarting would hide the problem rather
than fix it. The relay keeps serving locally; restart the relay to get a tunnel again.

The child's environment is the relay's without the relay's own settings and credentials
(``RELAY_*``, ``OPENAI_*`` and each provider's key variable): a tunnel needs none of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from relay import log
from relay.clock import Clock
from relay.config import Config
from relay.transport.deadline import Deadline
from relay.tunnel_command import TunnelCommand
from relay.tunnel_output import LineSplitter, public_url, sanitize

STOP_GRACE_S = 5.0  # SIGTERM → SIGKILL
URL_WAIT_S = 30.0  # then say that no URL has been seen
OUTPUT_DRAIN_S = 1.0  # after the exit, for its last lines to arrive
LAST_LINES = 5
_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "AUTH")


def child_environment(environ: Mapping[str, str], config: Config) -> dict[str, str]:
    """The relay's environment minus what belongs to the relay (see the module docstring)."""
    own = {provider.api_key_env for provider in config.providers.values()}
    return {
        name: value
        for name, value in environ.items()
        if not name.startswith(("RELAY_", "OPENAI_")) and name not in own
    }


def secret_values(environ: Mapping[str, str]) -> list[str]:
    """Values of variables whose name says credential (``NGROK_AUTHTOKEN`` …): the tunnel
    may echo them, so they are redacted from whatever of its output is shown."""
    return [
        value
        for name, value in environ.items()
        if len(value) >= 8 and any(word in name.upper() for word in _SECRET_WORDS)
    ]


def describe_status(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


class Tunnel:
    """One run of the tunnel program: :meth:`start`, then :meth:`stop` with the relay."""

    def __init__(
        self,
        command: TunnelCommand,
        *,
        clock: Clock,
        port: int,
        local_url: str,
        token_hint: str,
        env: Mapping[str, str],
        secrets: Iterable[str | None] = (),
        announce: Callable[[str], None] | None = None,
        stop_grace_s: float = STOP_GRACE_S,
        url_wait_s: float = URL_WAIT_S,
    ) -> None:
        self.command = command
        self.port = port
        self.pid: int | None = None
        self.url: str | None = None
        self.returncode: int | None = None
        self.forced = False  # it ignored SIGTERM and was killed
        self.exited = asyncio.Event()  # set once it has exited (or could not start)
        self._clock = clock
        self._local_url = local_url
        self._token_hint = token_hint
        self._env = dict(env)
        self._secrets = [s for s in secrets if s] + secret_values(self._env)
        self._announce = announce or _print
        self._stop_grace_s = stop_grace_s
        self._url_wait_s = url_wait_s
        self._transport: asyncio.SubprocessTransport | None = None
        self._lines = LineSplitter()
        self._last: deque[str] = deque(maxlen=LAST_LINES)
        self._output_closed = asyncio.Event()
        self._process_gone = asyncio.Event()
        self._url_wait: Deadline | None = None
        self._stopping = False
        self._supervisor: asyncio.Task[None] | None = None

    @classmethod
    def for_relay(
        cls,
        config: Config,
        *,
        clock: Clock,
        port: int,
        relay_token: str,
        token_path: str | None,
        upstream_key: str | None,
    ) -> Tunnel:
        assert config.tunnel_command is not None
        host = config.host if ":" not in config.host else f"[{config.host}]"
        hint = (
            f"the relay token stored in {token_path}"
            if token_path is not None
            else "the relay token (the value of RELAY_TOKEN)"
        )
        return cls(
            config.tunnel_command,
            clock=clock,
            port=port,
            local_url=f"http://{host}:{port}/v1",
            token_hint=hint,
            env=child_environment(os.environ, config),
            secrets=[
                relay_token,
                config.admin_token,
                config.openai_api_key,
                upstream_key,
                *(provider.api_key for provider in config.providers.values()),
            ],
        )

    @property
    def state(self) -> str:
        """For status and /readyz: ``starting`` (no public URL yet), ``up``, ``exited``
        (it died or could not start; not restarted) or ``stopped`` (with the relay)."""
        if self.exited.is_set():
            return "stopped" if self._stopping else "exited"
        return "up" if self.url is not None else "starting"

    async def start(self) -> bool:
        """Start the program; ``False`` (after saying why) if it could not be started."""
        loop = asyncio.get_running_loop()
        program = self.command.program
        try:
            transport, _ = await loop.subprocess_exec(
                lambda: _Protocol(self),
                *self.command.argv(self.port),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=self._env,
                start_new_session=True,
            )
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            self._announce(
                f"tunnel: cannot start {program}: {reason}; "
                f"the relay keeps serving locally at {self._local_url}"
            )
            log.event("tunnel_failed", logging.WARNING, program=program, reason=reason)
            self.exited.set()
            return False
        self._transport = transport
        self.pid = transport.get_pid()
        log.event("tunnel_started", program=program, pid=self.pid)
        self._announce(
            f"tunnel: {program} started (pid {self.pid}) for port {self.port}; its public "
            "URL and the Cursor settings follow once it reports one"
        )
        self._url_wait = Deadline(self._clock, self._url_wait_s, self._no_url_yet)
        self._supervisor = asyncio.ensure_future(self._supervise())
        return True

    async def stop(self) -> None:
        """Stop it with the relay: SIGTERM to its group, SIGKILL after the grace period."""
        self._stopping = True
        if self._transport is None:
            return
        if not self._process_gone.is_set():
            self._signal_group(signal.SIGTERM)
            if not await self._wait(self._process_gone.wait(), self._stop_grace_s):
                self.forced = True
                self._signal_group(signal.SIGKILL)
                await self._wait(self._process_gone.wait(), self._stop_grace_s)
        if self._supervisor is not None:
            await self._supervisor

    # --- called by the protocol ---------------------------------------------------------

    def _on_output(self, data: bytes) -> None:
        for line in self._lines.feed(data):
            self._on_line(line)

    def _on_output_closed(self) -> None:
        for line in self._lines.close():
            self._on_line(line)
        self._output_closed.set()

    def _on_process_exited(self) -> None:
        self._process_gone.set()

    # --- internals ------------------------------------------------------------------------

    def _on_line(self, line: str) -> None:
        shown = sanitize(line, self._secrets)
        if shown:
            self._last.append(shown)
        url = public_url(line)
        if url is None or url == self.url:
            return
        changed = self.url is not None
        self.url = url
        if self._url_wait is not None:
            self._url_wait.stop()
        log.event("tunnel_url", url=url, changed=changed)
        what = "public URL changed to" if changed else "public URL"
        self._announce(
            "\n".join(
                [
                    f"tunnel: {what} {url} (from {self.command.program}, pid {self.pid})",
                    "  In Cursor > Settings > Models:",
                    f"    Override OpenAI Base URL: {url}/v1",
                    f"    OpenAI API Key: {self._token_hint}",
                ]
            )
        )

    def _no_url_yet(self) -> None:
        if self.url is None and not self._process_gone.is_set():
            self._announce(
                f"tunnel: {self.command.program} has reported no public https URL after "
                f"{self._url_wait_s:g} s (ngrok needs --log stdout); the relay is serving "
                f"locally at {self._local_url}"
            )

    async def _supervise(self) -> None:
        await self._process_gone.wait()
        # Whatever it left behind in its group goes too (it might hold the output open).
        self._signal_group(signal.SIGKILL)
        await self._wait(self._output_closed.wait(), OUTPUT_DRAIN_S)
        if self._url_wait is not None:
            self._url_wait.stop()
        assert self._transport is not None
        code = self._transport.get_returncode()
        self.returncode = code if code is not None else -signal.SIGKILL
        self._transport.close()
        status = describe_status(self.returncode)
        program = self.command.program
        if self._stopping:
            log.event("tunnel_stopped", program=program, status=status, forced=self.forced)
        else:
            log.event("tunnel_exited", logging.WARNING, program=program, status=status)
            self._announce(self._death_report(status))
        self.exited.set()

    def _death_report(self, status: str) -> str:
        lost = f"; {self.url} no longer reaches it" if self.url else ""
        lines = [
            f"tunnel: {self.command.program} (pid {self.pid}) {status} and is not restarted; "
            f"the relay keeps serving locally at {self._local_url}{lost}"
        ]
        if self._last:
            lines.append("tunnel: its last output (sanitized):")
            lines.extend(f"  | {line}" for line in self._last)
        return "\n".join(lines)

    def _signal_group(self, sig: signal.Signals) -> None:
        if self.pid is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is empty
            os.killpg(self.pid, sig)

    async def _wait(self, awaitable: Awaitable[Any], seconds: float) -> bool:
        """Await it for at most ``seconds`` on the injected clock; ``True`` if it finished."""
        expired = asyncio.Event()
        deadline = Deadline(self._clock, seconds, expired.set)
        waiting = asyncio.ensure_future(awaitable)
        timer = asyncio.ensure_future(expired.wait())
        try:
            await asyncio.wait({waiting, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            deadline.stop()
            timer.cancel()
        if waiting.done():
            return True
        waiting.cancel()
        return False


class _Protocol(asyncio.SubprocessProtocol):
    """Feeds the tunnel as data and exits happen. ``process_exited`` fires at the exit
    itself, not when every copy of the output pipe is closed, as ``Process.wait()`` would."""

    def __init__(self, tunnel: Tunnel) -> None:
        self._tunnel = tunnel

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self._tunnel._on_output(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._tunnel._on_output_closed()

    def process_exited(self) -> None:
        self._tunnel._on_process_exited()


def _print(text: str) -> None:
    print(text, flush=True)
