"""A team deployment on loopback: several ``relay serve`` processes behind haproxy, one fake
upstream for all of them (its sealing key is shared, as OpenAI's is: a block sealed through
one instance opens through another), each relay with its metrics on a loopback port.

What the instances share is the environment the test gives (``REASONING_CACHE_URL`` for a
PostgreSQL store); without it each keeps a SQLite store of its own under its directory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from fakeupstream.fake import FakeUpstream
from tests.support.haproxy import INSTANCE_HEADER, Haproxy
from tests.support.serve_process import TIMEOUT, Relay, env_for
from tests.support.stack import TOKEN, UPSTREAM_KEY

HEADERS = {"Authorization": f"Bearer {TOKEN}"}


@dataclass(frozen=True)
class Turn:
    """One chat request through the load balancer: who served it and what came back."""

    status: int
    instance: str | None  # haproxy's name of the relay that answered (r1, r2, ...)
    body: dict[str, Any]

    @property
    def text(self) -> str:
        assert self.status == 200, (self.status, self.body)
        return str(self.body["choices"][0]["message"]["content"])

    @property
    def error_code(self) -> str | None:
        error = self.body.get("error")
        return None if error is None else error.get("code")


@dataclass
class Team:
    directory: Path
    env: Mapping[str, str]  # every instance's: the upstream (OPENAI_*), the shared store ...
    relays: dict[str, Relay] = field(default_factory=dict)
    metrics_urls: dict[str, str] = field(default_factory=dict)
    proxy: Haproxy | None = None

    def start_relays(self, *names: str, **env: str) -> list[Relay]:
        """Start relays ``names`` side by side (with ``env`` on top of the team's) and wait
        until each listens."""
        started = []
        for name in names:
            if name in self.relays:  # a restart: the old process is reaped first
                self.relays[name].close()
            settings = {"RELAY_METRICS_PORT": "0"} | dict(self.env) | env
            relay_env = env_for(self.directory / name, None, **settings)
            started.append(Relay(relay_env, label=f"team relay {name}", wait=False))
            self.relays[name] = started[-1]
        for name, relay in zip(names, started, strict=True):
            relay.ready()
            self.metrics_urls[name] = relay.wait_for(r"^metrics: (\S+)").group(1)
        return started

    def start_proxy(self, health_path: str | None = None) -> Haproxy:
        servers = [(name, relay.base) for name, relay in self.relays.items()]
        extra = {} if health_path is None else {"health_path": health_path}
        self.proxy = Haproxy(servers, self.directory / "haproxy", **extra)
        return self.proxy

    @property
    def base(self) -> str:
        assert self.proxy is not None
        return self.proxy.base

    def chat(self, messages: list[dict[str, Any]], model: str = "gpt-5") -> Turn:
        """One non-streaming chat request through haproxy."""
        answer = requests.post(
            f"{self.base}/chat/completions",
            json={"model": model, "messages": messages}, headers=HEADERS, timeout=TIMEOUT,
        )  # fmt: skip
        return Turn(answer.status_code, answer.headers.get(INSTANCE_HEADER), answer.json())

    @contextmanager
    def stream(self, messages: list[dict[str, Any]]) -> Iterator[requests.Response]:
        """A streaming chat request through haproxy, open while the block runs."""
        with requests.post(
            f"{self.base}/chat/completions",
            json={"model": "gpt-5", "messages": messages, "stream": True},
            headers=HEADERS, timeout=TIMEOUT, stream=True,
        ) as answer:  # fmt: skip
            yield answer

    def requests_served(self, name: str, route: str = "chat_completions") -> dict[str, float]:
        """Relay ``name``'s own count of finished requests on ``route``, by outcome."""
        text = requests.get(self.metrics_urls[name], timeout=TIMEOUT).text
        families = {f.name: f for f in text_string_to_metric_families(text)}
        return {
            sample.labels["outcome"]: sample.value
            for sample in families["relay_requests"].samples
            if sample.name == "relay_requests_total" and sample.labels["route"] == route
        }

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()
        for relay in self.relays.values():
            relay.close()


DONE = "[DONE]"


def data_frames(answer: requests.Response) -> Iterator[Any]:
    """Each ``data:`` frame of a chat stream as it arrives, parsed (``DONE`` for
    ``[DONE]``). One iterator per stream: it buffers what it has read."""
    for line in answer.iter_lines():
        if line.startswith(b"data: "):
            payload = line[len(b"data: ") :]
            yield DONE if payload == b"[DONE]" else json.loads(payload)


def content_deltas(frames: Iterator[Any]) -> Iterator[str]:
    """The content of each chunk, as it arrives, up to ``[DONE]``."""
    for frame in frames:
        if frame == DONE:
            return
        for choice in frame.get("choices", []):
            if content := choice.get("delta", {}).get("content"):
                yield content


def stream_end(frames: Iterator[Any]) -> list[dict[str, Any]]:
    """The rest of a stream: its error frames, ``[]`` if it ended with ``[DONE]``."""
    errors = []
    for frame in frames:
        if frame == DONE:
            return []
        if "error" in frame:
            errors.append(frame["error"])
    assert errors, "the stream ended with neither [DONE] nor an error frame"
    return errors


def upstream_env(fake: FakeUpstream) -> dict[str, str]:
    return {"OPENAI_API_KEY": UPSTREAM_KEY, "OPENAI_BASE_URL": fake.base_url}


@contextmanager
def team(
    upstream: FakeUpstream, directory: Path, names: tuple[str, ...], **env: str
) -> Iterator[Team]:
    """Relays ``names`` behind haproxy, all stopped (killed) however the test ends."""
    deployment = Team(directory, upstream_env(upstream) | env)
    try:
        deployment.start_relays(*names)
        deployment.start_proxy()
        yield deployment
    finally:
        deployment.close()
