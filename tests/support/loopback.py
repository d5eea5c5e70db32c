"""A relay on a loopback port for the handler tests: alone (:func:`relay`, its upstream
unreachable) or in front of an in-process fake upstream (:func:`loopback`); both are real
Tornado servers on 127.0.0.1, driven from the test's event loop."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPResponse

from fakeupstream.fake import FakeUpstream
from relay.app.runtime import Runtime
from relay.app.server import RelayServer
from relay.settings.config import load_config

TOKEN = "rr-test-token-0123456789"


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


@asynccontextmanager
async def relay(tmp_path: Path, **env: str) -> AsyncIterator[tuple[RelayServer, str]]:
    cfg = load_config({"RELAY_PORT": "0", "RELAY_DATA_DIR": str(tmp_path / "data"),
                       "OPENAI_API_KEY": "sk-x", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
                       **env})  # fmt: skip
    server = RelayServer(cfg)
    port = await server.start()
    try:
        yield server, f"http://127.0.0.1:{port}"
    finally:
        await server.stop()


def error_of(answer: HTTPResponse) -> dict[str, Any]:
    assert answer.headers["Content-Type"] == "application/json"
    envelope = json.loads(answer.body)
    assert set(envelope) == {"error"}
    assert set(envelope["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = envelope["error"]
    return error


@dataclass
class Loop:
    fake: FakeUpstream
    runtime: Runtime
    base: str

    async def post(self, path: str, body: dict[str, Any]) -> HTTPResponse:
        client = AsyncHTTPClient(force_instance=True)
        try:
            return await client.fetch(
                self.base + path, method="POST", body=json.dumps(body), raise_error=False,
                headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
            )  # fmt: skip
        finally:
            client.close()


@asynccontextmanager
async def loopback(tmp_path: Path, **env: str) -> AsyncIterator[Loop]:
    fake = FakeUpstream()
    fake_port = await fake.start()
    cfg = load_config({
        "RELAY_PORT": "0", "RELAY_DATA_DIR": str(tmp_path / "data"), "RELAY_TOKEN": TOKEN,
        "OPENAI_API_KEY": "sk-loop", "OPENAI_BASE_URL": f"http://127.0.0.1:{fake_port}/v1",
        **env,
    })  # fmt: skip
    server = RelayServer(cfg)
    port = await server.start()
    try:
        assert server.runtime is not None
        yield Loop(fake, server.runtime, f"http://127.0.0.1:{port}")
    finally:
        await server.stop()
        await fake.stop()
