"""The tunnel program (``RELAY_TUNNEL_CMD``) as a supervised child of ``relay serve``.

It runs in its own session, hence its own process group: the terminal's Ctrl-C reaches
only the relay, which then stops the whole group itself (SIGTERM, then SIGKILL after a
grace period), so a tunnel cannot outlive a relay that shuts down, whether on SIGTERM,
SIGINT or a normal stop. A relay killed with SIGKILL cannot do this; its tunnel is left
running.

A descendant that leaves the group (``setsid``: a daemonizing helper) is found through
/proc (:mod:`relay.tunnel.process_tree`: by ancestry, and by a random ``RELAY_TUNNEL_MARK`` in the
environment the tunnel starts with) and stopped with the group; without /proc (macOS, the
BSDs) only the group is.

Its output (stdout and stderr, merged) is read line by line: the first public HTTPS URL
it reports is printed with the Cursor settings to paste, and the last few lines are kept,
sanitized, for the report if it dies. Output is never logged; logs get only the program
name, pid, the parsed URL and exit statuses.

Reading that output never holds the event loop: lines are read in slices of at most
:data:`SLICE_LINES` lines (4 KiB split at a time), the loop running in between, and at
most :data:`LINES_PER_INTERVAL` lines or :data:`BYTES_PER_INTERVAL` bytes a second. While
read lines wait, the pipe is not read, so a program printing faster than that is slowed to
that pace by its own blocked writes; nothing it prints is skipped, so a URL after a flood
is still found. Each distinct URL is announced (and logged) once, and after
:data:`MAX_URLS` of them no more are: a program printing URLs in a loop cannot flood the
console or the log.

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
from secrets import token_hex
from typing import Any, cast

from relay.clock import Clock, Deadline
from relay.observability import log
from relay.settings.config import Config
from relay.settings.tunnel_command import TunnelCommand
from relay.tunnel.output import LineSplitter, public_url, sanitize
from relay.tunnel.process_tree import MARK_VARIABLE, Process, left_behind, signal_all

STOP_GRACE_S = 5.0  # SIGTERM → SIGKILL
URL_WAIT_S = 30.0  # then say that no URL has been seen
OUTPUT_DRAIN_S = 1.0  # after the exit, for its last lines to arrive
LAST_LINES = 5
# Reading its output (see the module docstring).
SLICE_LINES = 64  # lines (or 4 KiB splits) per loop turn
SPLIT_BYTES = 4096
OUTPUT_INTERVAL_S = 1.0
LINES_PER_INTERVAL = 1000
BYTES_PER_INTERVAL = 1024 * 1024
MAX_URLS = 8  # distinct URLs announced, then no more
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
        self._mark = _new_mark()
        self._env = {**env, MARK_VARIABLE: self._mark}
        self._secrets = [s for s in secrets if s] + secret_values(env)
        self._announce = announce or _print
        self._stop_grace_s = stop_grace_s
        self._url_wait_s = url_wait_s
        self._transport: asyncio.SubprocessTransport | None = None
        self._lines = LineSplitter()
        self._last: deque[str] = deque(maxlen=LAST_LINES)  # as read: sanitized when shown
        self._pending = bytearray()  # read from the pipe, not split yet
        self._backlog: deque[str] = deque()  # split, not looked at yet
        self._eof = False  # the pipe is closed: what is pending is the rest
        self._drain_call: asyncio.Handle | None = None
        self._drain_wait: Deadline | None = None
        self._window_start = clock.monotonic()
        self._window_lines = 0
        self._window_bytes = 0
        self._urls: set[str] = set()  # announced
        self._left_behind: set[Process] = set()  # its descendants outside its group
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
            # Before the signal: while the tunnel lives, its descendants are its tree.
            self._left_behind |= await asyncio.to_thread(left_behind, self.pid, self._mark)
            signal_all(self._left_behind, signal.SIGTERM)
            self._signal_group(signal.SIGTERM)
            if not await self._wait(self._process_gone.wait(), self._stop_grace_s):
                self.forced = True
                self._signal_group(signal.SIGKILL)
                await self._wait(self._process_gone.wait(), self._stop_grace_s)
        if self._supervisor is not None:
            await self._supervisor

    # --- called by the protocol ---------------------------------------------------------

    def _on_output(self, data: bytes) -> None:
        self._pending += data
        self._reading(False)  # until what was read has been looked at
        self._schedule_drain()

    def _on_output_closed(self) -> None:
        self._eof = True
        self._schedule_drain()

    def _on_process_exited(self) -> None:
        self._process_gone.set()

    # --- internals ------------------------------------------------------------------------

    def _schedule_drain(self) -> None:
        if self._drain_call is None and self._drain_wait is None:
            self._drain_call = asyncio.get_running_loop().call_soon(self._drain)

    def _drain(self) -> None:
        """Look at one slice of what was read; then yield, wait for the next interval
        when its budget is spent, or read on once nothing is left."""
        self._drain_call = self._drain_wait = None
        for _ in range(SLICE_LINES):
            if not self._within_budget():
                return
            if self._backlog:
                self._window_lines += 1
                self._on_line(self._backlog.popleft())
            elif self._pending:
                piece = bytes(self._pending[:SPLIT_BYTES])
                del self._pending[:SPLIT_BYTES]
                self._window_bytes += len(piece)
                self._backlog.extend(self._lines.feed(piece))
            else:
                break
        if self._backlog or self._pending:
            self._schedule_drain()
        elif self._eof:
            for line in self._lines.close():
                self._on_line(line)
            self._output_closed.set()
        else:
            self._reading(True)

    def _within_budget(self) -> bool:
        now = self._clock.monotonic()
        if now - self._window_start >= OUTPUT_INTERVAL_S:
            self._window_start, self._window_lines, self._window_bytes = now, 0, 0
        if self._window_lines < LINES_PER_INTERVAL and self._window_bytes < BYTES_PER_INTERVAL:
            return True
        rest = self._window_start + OUTPUT_INTERVAL_S - now
        self._drain_wait = Deadline(self._clock, rest, self._drain)
        return False

    def _reading(self, on: bool) -> None:
        found = self._transport.get_pipe_transport(1) if self._transport is not None else None
        # The stdout pipe reads; uvloop's transports do not subclass asyncio's ABCs, so the
        # type is stated, not tested (relay.app.event_loop).
        pipe = cast(asyncio.ReadTransport | None, found)
        if pipe is not None and not pipe.is_closing():
            if on:
                pipe.resume_reading()
            else:
                pipe.pause_reading()

    def _stop_draining(self) -> None:
        if self._drain_call is not None:
            self._drain_call.cancel()
        if self._drain_wait is not None:
            self._drain_wait.stop()
        self._drain_call = self._drain_wait = None
        self._pending.clear()
        self._backlog.clear()

    def _on_line(self, line: str) -> None:
        if line.strip():
            self._last.append(line)
        url = public_url(line)
        if url is None or url in self._urls or len(self._urls) > MAX_URLS:
            return
        self._urls.add(url)
        if len(self._urls) > MAX_URLS:
            program = self.command.program
            log.event("tunnel_urls_ignored", logging.WARNING, program=program, shown=MAX_URLS)
            self._announce(
                f"tunnel: {self.command.program} keeps reporting new public URLs; after "
                f"{MAX_URLS} no more are shown (the last one shown may not be current)"
            )
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
        # Whatever it left behind goes too (it might hold the output open): its group, and
        # what left the group (found earlier by ancestry, or now by the mark).
        self._signal_group(signal.SIGKILL)
        self._left_behind |= await asyncio.to_thread(left_behind, None, self._mark)
        signal_all(self._left_behind, signal.SIGKILL)
        await self._wait(self._output_closed.wait(), OUTPUT_DRAIN_S)
        self._stop_draining()
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
        shown = [text for line in self._last if (text := sanitize(line, self._secrets))]
        if shown:
            lines.append("tunnel: its last output (sanitized):")
            lines.extend(f"  | {line}" for line in shown)
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

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Output may arrive before subprocess_exec returns: pausing needs the transport.
        # subprocess_exec's transport (uvloop's subclasses none of asyncio's ABCs)
        self._tunnel._transport = cast(asyncio.SubprocessTransport, transport)

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self._tunnel._on_output(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._tunnel._on_output_closed()

    def process_exited(self) -> None:
        self._tunnel._on_process_exited()


def _print(text: str) -> None:
    print(text, flush=True)


def _new_mark() -> str:
    """A value no other process's environment holds (see :mod:`relay.tunnel.process_tree`)."""
    return f"{os.getpid()}-{token_hex(8)}"
