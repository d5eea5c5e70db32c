"""A fake upstream and a relay on loopback, served from a background IOLoop thread.

Tests talk to them with blocking clients (the openai SDK, requests) from the test thread,
exactly as a real client would.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from collections.abc import Callable, Coroutine, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from fakeupstream.fake import FakeUpstream
from relay.app.server import RelayServer
from relay.clock import Clock, SystemClock
from relay.settings.config import Config, load_config
from tests.support import recordings

T = TypeVar("T")
TOKEN = "test-relay-token-0123456789"
UPSTREAM_KEY = "sk-test-upstream-key"
PROVIDER_KEY_ENV = "TEST_PROVIDER_KEY"
PROVIDER_KEY = "sk-test-provider-key"


class LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@dataclasses.dataclass
class Stack:
    loop: LoopThread
    fake: FakeUpstream
    relay: RelayServer
    config: Config
    clock: Clock = dataclasses.field(default_factory=SystemClock)
    # Clients handed out by openai(), closed with the stack: an SDK client left to the
    # garbage collector closes its pooled socket late, as a ResourceWarning in some
    # other test.
    clients: list[Any] = dataclasses.field(default_factory=list)

    @property
    def port(self) -> int:
        port = self.relay.port
        assert port is not None  # the stack is running
        return port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.relay.port}/v1"

    @property
    def token(self) -> str:
        return TOKEN

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

    def restart_relay(self) -> None:
        """Stop the relay and start a new one with the same config, data and upstream."""
        self.loop.run(self.relay.stop())
        self.relay = RelayServer(self.config, clock=self.clock)
        self.loop.run(self.relay.start())

    def script(self, *scripts: Mapping[str, Any]) -> None:
        self.fake.enqueue(*scripts)

    def openai(self, **kwargs: Any) -> Any:
        import openai

        client = openai.OpenAI(
            base_url=self.base_url,
            api_key=TOKEN,
            max_retries=0,
            _strict_response_validation=True,
            **kwargs,
        )
        self.clients.append(client)
        return client

    def close_clients(self) -> None:
        for client in self.clients:
            client.close()
        self.clients.clear()


@contextmanager
def running_stack(
    data_dir: Path,
    env: Mapping[str, str] | None = None,
    *,
    clock: Clock | None = None,
    providers: Mapping[str, Mapping[str, Any]] | None = None,
    fake_strict: str | None = None,
) -> Iterator[Stack]:
    """``providers``: RELAY_PROVIDERS entries served by the fake (``base_url`` and
    ``api_key_env`` filled in unless given); ``fake_strict``: the fake's Chat rule."""
    loop = LoopThread()
    # The recorded streams are the only files a script may replay (raw_sse_file).
    fake = FakeUpstream(
        clock=SystemClock(), seed=1234, strict=fake_strict, files_dir=recordings.RECORDINGS
    )
    clock = clock if clock is not None else SystemClock()
    try:
        loop.run(fake.start("127.0.0.1", 0))
        base = {
            "RELAY_PORT": "0",
            "RELAY_TOKEN": TOKEN,
            "RELAY_DATA_DIR": str(data_dir),
            "OPENAI_API_KEY": UPSTREAM_KEY,
            "OPENAI_BASE_URL": fake.base_url,
            "RELAY_SSE_KEEPALIVE_MS": "0",
        }
        if providers:
            specs = {
                name: {"base_url": fake.base_url, "api_key_env": PROVIDER_KEY_ENV, **spec}
                for name, spec in providers.items()
            }
            base |= {"RELAY_PROVIDERS": json.dumps(specs), PROVIDER_KEY_ENV: PROVIDER_KEY}
        config = load_config({**base, **(env or {})})
        relay = RelayServer(config, clock=clock)
        loop.run(relay.start())
        stack = Stack(loop, fake, relay, config, clock)
        try:
            yield stack
        finally:
            stack.close_clients()
            loop.run(stack.relay.stop())
    finally:
        loop.run(fake.stop())
        loop.close()


# The fixture (tests/integration/conftest.py): a relay stack with these settings.
StackFactory = Callable[[dict[str, str]], AbstractContextManager[Stack]]
