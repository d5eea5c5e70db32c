"""``relay serve`` without OPENAI_API_KEY, as a real process: the embedded fake serves the
model API only (no ``/__fake/`` control for a local user or a web page to reach), and with
the cache on a conversation keeps replaying its reasoning across a restart (the fake's
scope identity and sealing key are the same on every start over one data directory)."""

from __future__ import annotations

import re
import signal
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from tests.support.relay_cli import relay_env, serving

LABEL = "test_offline_serve relay serve"
FAKE_URL = re.compile(r"built-in fake Responses API at (http://\S+?)/v1")
CONTINUITY = re.compile(r"continuity: replayed=(\d+) intact=(\d+) misplaced=(\d+)")


@dataclass
class Offline:
    proc: subprocess.Popen[str]
    base_url: str  # the relay's, .../v1
    fake_origin: str  # the embedded fake's, http://127.0.0.1:PORT
    token: str

    def chat(self, messages: list[dict[str, Any]]) -> str:
        answer = requests.post(
            f"{self.base_url}/chat/completions",
            json={"model": "gpt-5", "messages": messages},
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        content: str = answer.json()["choices"][0]["message"]["content"]
        return content

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(30) == 0


@contextmanager
def offline_relay(tmp_path: Path, **env: str) -> Iterator[Offline]:
    with serving(relay_env(tmp_path, **env), LABEL) as proc:
        assert proc.stdout is not None
        base = fake = None
        for _ in range(30):  # the banner: the relay's URL first, the fake's on its own line
            line = proc.stdout.readline()
            assert line, "relay serve exited before its banner"
            if line.startswith("relay listening on "):
                base = line.split()[-1]
            if found := FAKE_URL.search(line):
                fake = found.group(1)
            if base and fake:
                break
        assert base and fake, "no relay or fake URL in the banner"
        token = (tmp_path / "data" / "relay-token").read_text().strip()
        yield Offline(proc, base, fake, token)


def test_the_embedded_fake_serves_no_control(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("root-only\n")
    with offline_relay(tmp_path) as relay:
        controls = ("scripts", "requests", "reset", "rotate_key", "strict", "cassette", "health")
        for name in controls:
            url = f"{relay.fake_origin}/__fake/{name}"
            assert requests.get(url, timeout=10).status_code == 404, name
            # What a web page can send cross-origin without a preflight: a text/plain POST.
            sneaky = requests.post(
                url,
                data=f'[{{"raw_sse_file": "{secret}"}}]',
                headers={"Content-Type": "text/plain"},
                timeout=10,
            )
            assert sneaky.status_code == 404, name
            assert "Invalid URL" in sneaky.json()["error"]["message"]
        # Nothing was queued: the next answer is still the fake's own, not the file.
        answer = relay.chat([{"role": "user", "content": "ping"}])
        assert answer.startswith("Echo: ping") and "root-only" not in answer
        relay.stop()


def test_a_conversation_replays_its_reasoning_across_a_restart(tmp_path: Path) -> None:
    env = {"REASONING_CACHE_ENABLED": "1"}
    key_file = tmp_path / "data" / "offline-fake.key"
    conversation: list[dict[str, Any]] = []

    def turn(relay: Offline, text: str) -> tuple[int, int, int]:
        conversation.append({"role": "user", "content": text})
        answer = relay.chat(conversation)
        conversation.append({"role": "assistant", "content": answer})
        found = CONTINUITY.search(answer)
        assert found, answer
        replayed, intact, misplaced = (int(n) for n in found.groups())
        return replayed, intact, misplaced

    with offline_relay(tmp_path, **env) as first:
        assert turn(first, "one") == (0, 0, 0)
        assert turn(first, "two") == (1, 1, 0)
        first_fake = first.fake_origin
        first.stop()
    key = key_file.read_bytes()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    with offline_relay(tmp_path, **env) as second:
        assert second.fake_origin != first_fake  # a new port: not part of the scope
        # Both earlier blocks come back, and the fake's own key (kept) still opens them.
        assert turn(second, "three") == (2, 2, 0)
        second.stop()
    assert key_file.read_bytes() == key  # created once, kept
