"""relay.handlers.models: ``GET /v1/models`` lists the aliases first, then the upstream's
own models, and still answers 200 when the upstream cannot say (relay on loopback; the
list itself is relay.upstream.model_list's, its fetch relay.upstream.models')."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from tornado.httpclient import AsyncHTTPClient

from fakeupstream.models import MODELS
from relay.app.offline import load_offline_upstream
from relay.app.server import RelayServer
from relay.settings.config import load_config

TOKEN = "rr-test-token-0123456789"
ALIASES = json.dumps({"fast": "gpt-5-mini", "deep": {"model": "gpt-5", "reasoning_effort": "high"}})


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


async def listed(tmp_path: Path, **env: str) -> tuple[int, dict[str, Any]]:
    cfg = load_config({"RELAY_PORT": "0", "RELAY_DATA_DIR": str(tmp_path / "data"),
                       "RELAY_TOKEN": TOKEN, "RELAY_MODEL_ALIASES": ALIASES, **env})  # fmt: skip
    server = RelayServer(cfg, offline=load_offline_upstream())
    port = await server.start()
    client = AsyncHTTPClient(force_instance=True)
    try:
        answer = await client.fetch(f"http://127.0.0.1:{port}/v1/models", raise_error=False,
                                    headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
        return answer.code, json.loads(answer.body)
    finally:
        client.close()
        await server.stop()


def test_the_aliases_come_first_then_the_upstream_s_models(tmp_path: Path) -> None:
    async def test() -> None:
        code, page = await listed(tmp_path)  # no key: the offline fake is the upstream
        assert code == 200 and page["object"] == "list"
        ids = [entry["id"] for entry in page["data"]]
        assert ids[:2] == ["deep", "fast"]  # by name
        assert ids[2:] == sorted(MODELS)
        assert {e["owned_by"] for e in page["data"][:2]} == {"relay"}
        assert all(e["object"] == "model" for e in page["data"])

    run(test)


def test_an_upstream_that_cannot_say_leaves_the_aliases_alone(tmp_path: Path) -> None:
    async def test() -> None:
        code, page = await listed(tmp_path, OPENAI_API_KEY="sk-x",
                                  OPENAI_BASE_URL="http://127.0.0.1:9/v1")  # fmt: skip
        assert code == 200
        assert [entry["id"] for entry in page["data"]] == ["deep", "fast"]

    run(test)
