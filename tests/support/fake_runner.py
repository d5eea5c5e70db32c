"""A FakeUpstream on a real loopback socket, served from its own IOLoop thread so plain
blocking clients (``requests``, raw sockets, the ``openai`` SDK) can talk to it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

from fakeupstream import FakeUpstream


class Runner:
    """A FakeUpstream served from a background thread's event loop."""

    def __init__(self, fake: FakeUpstream) -> None:
        self.fake = fake
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def call(self, coroutine: Any, timeout: float = 10) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result(timeout)

    @property
    def url(self) -> str:
        return self.fake.base_url


@contextmanager
def running_fake(runner_class: type[Runner] = Runner, **options: Any) -> Iterator[Runner]:
    runner = runner_class(FakeUpstream(**options))
    runner.thread.start()
    try:
        runner.call(runner.fake.start())
        yield runner
    finally:
        runner.call(runner.fake.stop())
        runner.loop.call_soon_threadsafe(runner.loop.stop)
        runner.thread.join(5)
        runner.loop.close()
