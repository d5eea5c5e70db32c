"""relay.handlers.responses: the Responses passthrough checks what it must before
forwarding (a Responses provider, ``stream``, ``user``), resolves an alias, and fences
the cache's scopes before the body goes upstream -- or refuses with 503, sending nothing,
when the fence cannot be written (a relay and the fake upstream on loopback ports)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from tests.support.loopback import error_of, loopback

CACHE = {"REASONING_CACHE_ENABLED": "1",
         "RELAY_MODEL_ALIASES": json.dumps({"fast": "gpt-5-mini"}),
         "RELAY_PROVIDERS": json.dumps({"local": {"kind": "chat",
                                                  "base_url": "http://127.0.0.1:9/v1",
                                                  "api_key_env": "LOCAL_KEY"}}),
         "LOCAL_KEY": "sk-local"}  # fmt: skip


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


def test_a_call_is_fenced_then_forwarded_with_the_alias_resolved(tmp_path: Path) -> None:
    async def test() -> None:
        async with loopback(tmp_path, **CACHE) as loop:
            answer = await loop.post("/v1/responses", {"model": "fast", "input": "hi"})
            assert answer.code == 200, answer.body
            assert json.loads(answer.body)["object"] == "response"  # not streamed: one object
            assert loop.runtime.cache.metrics.fenced == 1
            assert [r.body["model"] for r in loop.fake.requests] == ["gpt-5-mini"]
            assert loop.fake.requests[0].body["input"] == "hi"  # the body as sent

    run(test)


def test_a_streamed_call_comes_back_as_responses_events(tmp_path: Path) -> None:
    async def test() -> None:
        async with loopback(tmp_path, **CACHE) as loop:
            answer = await loop.post("/v1/responses",
                                     {"model": "gpt-5", "input": "hi", "stream": True})  # fmt: skip
            assert answer.code == 200
            assert answer.headers["Content-Type"].startswith("text/event-stream")
            assert b"event: response.completed" in answer.body

    run(test)


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ({"model": "gpt-5", "input": "hi", "stream": "yes"}, "stream", "true or false"),
        ({"model": "gpt-5", "input": "hi", "user": 7}, "user", "must be a string"),
        ({"model": "local/m", "input": "hi"}, "model", "POST /v1/chat/completions"),
        ({"input": "hi"}, "model", "'model' is required"),
    ],
)  # fmt: skip
def test_what_cannot_be_forwarded_is_refused_unfenced_and_unsent(
    tmp_path: Path, body: dict[str, Any], param: str, says: str
) -> None:
    async def test() -> None:
        async with loopback(tmp_path, **CACHE) as loop:
            answer = await loop.post("/v1/responses", body)
            assert answer.code == 400
            error = error_of(answer)
            assert error["param"] == param and says in error["message"]
            assert loop.runtime.cache.metrics.fenced == 0
            assert loop.fake.requests == []

    run(test)


def test_a_fence_that_cannot_be_written_sends_nothing(tmp_path: Path) -> None:
    async def test() -> None:
        async with loopback(tmp_path, **CACHE) as loop:
            store = loop.runtime.cache.store
            assert store is not None
            store.close()  # every write fails now
            answer = await loop.post("/v1/responses", {"model": "gpt-5", "input": "hi"})
            assert answer.code == 503
            assert loop.fake.requests == []

    run(test)
