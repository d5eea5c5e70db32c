"""``relay serve`` as a real subprocess against a fake upstream on a loopback port: its
output read by threads, so a test waits on a line (an event) instead of sleeping."""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import requests

from fakeupstream.fake import FakeUpstream
from tests.support.log_leaks import observe_process
from tests.support.relay_cli import relay_env
from tests.support.stack import TOKEN, UPSTREAM_KEY

TIMEOUT = 30.0


def env_for(tmp_path: Path, fake: FakeUpstream | None, **extra: str) -> dict[str, str]:
    base = {"RELAY_TOKEN": TOKEN, "REASONING_CACHE_ENABLED": "1", "RELAY_SSE_KEEPALIVE_MS": "0"}
    if fake is not None:
        base |= {"OPENAI_API_KEY": UPSTREAM_KEY, "OPENAI_BASE_URL": fake.base_url}
    return relay_env(tmp_path, **(base | extra))


class ProcessLines:
    """A process's stdout and stderr, read line by line by threads, so a test waits on a
    line (an event) instead of sleeping."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.readers = [
            threading.Thread(target=self._read, args=(stream,), daemon=True)
            for stream in (proc.stdout, proc.stderr)
        ]
        for reader in self.readers:
            reader.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            self.lines.put(line)

    def wait_for(self, pattern: str, timeout: float = TIMEOUT) -> re.Match[str]:
        """The first line so far, or from now on, that matches ``pattern``."""
        regex = re.compile(pattern)
        for line in self.seen:
            if match := regex.search(line):
                return match
        return self.wait_next(pattern, timeout)

    def wait_next(self, pattern: str, timeout: float = TIMEOUT) -> re.Match[str]:
        """The first line from now on that matches ``pattern``."""
        regex = re.compile(pattern)
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(
                    f"no line matching {pattern!r} within {timeout}s; "
                    f"the output so far:\n{''.join(self.seen)}"
                ) from None
            self.seen.append(line)
            if match := regex.search(line):
                return match

    def close(self) -> str:
        """Once the process has ended: the whole output (the pipes end with the process)."""
        for reader in self.readers:
            reader.join(TIMEOUT)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return "".join(self.seen)


class Relay:
    """``relay serve`` as a real process; its output read by threads, so a test waits on
    a line (an event) instead of sleeping."""

    def __init__(
        self,
        env: dict[str, str],
        label: str = "test_cache_backup relay serve",
        *,
        wait: bool = True,
    ) -> None:
        """``wait=False``: return once started; :meth:`ready` waits for it to listen (so
        several relays start side by side)."""
        self.env = env
        self.label = label
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "relay", "serve"], env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        self.output = ProcessLines(self.proc)
        self.base = ""
        if wait:
            self.ready()

    def ready(self) -> str:
        """Its base URL, once it listens."""
        if not self.base:
            self.base = self.wait_for(r"^relay listening on (\S+)").group(1)
        return self.base

    @property
    def seen(self) -> list[str]:
        return self.output.seen

    def wait_for(self, pattern: str) -> re.Match[str]:
        """The first line so far, or from now on, that matches ``pattern``."""
        return self.output.wait_for(pattern)

    def chat(self, messages: list[dict[str, Any]]) -> str:
        answer = requests.post(
            f"{self.base}/chat/completions",
            json={"model": "gpt-5", "messages": messages},
            headers={"Authorization": f"Bearer {TOKEN}"}, timeout=TIMEOUT,
        )  # fmt: skip
        assert answer.status_code == 200, answer.text
        return str(answer.json()["choices"][0]["message"]["content"])

    def conversation(self, prompt: str) -> list[dict[str, Any]]:
        text = self.chat([{"role": "user", "content": prompt}])
        return [{"role": "user", "content": prompt}, {"role": "assistant", "content": text},
                {"role": "user", "content": "and then?"}]  # fmt: skip

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(TIMEOUT) == 0
        self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        observe_process(self.label, self.output.close(), self.env)


def start(relays: list[Relay], env: dict[str, str], label: str | None = None) -> Relay:
    relays.append(Relay(env) if label is None else Relay(env, label))
    return relays[-1]
