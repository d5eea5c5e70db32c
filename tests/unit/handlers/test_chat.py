"""relay.handlers.chat: which requests get a cache session, that every session is closed
and forgotten however the request ends, and that a Chat provider's model goes to that
provider, not through the Responses translation (a relay and the fake upstream on
loopback ports)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from tests.support.loopback import error_of, loopback

CACHE = {"REASONING_CACHE_ENABLED": "1",
         "RELAY_PROVIDERS": json.dumps({"local": {"kind": "chat",
                                                  "base_url": "http://127.0.0.1:9/v1",
                                                  "api_key_env": "LOCAL_KEY"}}),
         "LOCAL_KEY": "sk-local"}  # fmt: skip
HI = [{"role": "user", "content": "hi"}]


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


def test_a_reasoning_model_s_request_is_cached_and_its_session_closed(tmp_path: Path) -> None:
    async def test() -> None:
        async with loopback(tmp_path, **CACHE) as loop:
            loop.fake.enqueue({"output": [{"type": "reasoning", "summary": []},
                                          {"type": "message", "text": "hello"}]})  # fmt: skip
            answer = await loop.post("/v1/chat/completions", {"model": "gpt-5", "messages": HI})
            assert answer.code == 200, answer.body
            message = json.loads(answer.body)["choices"][0]["message"]
            assert message["content"] == "hello"
            cache = loop.runtime.cache
            assert (cache.metrics.requests, dict(cache.metrics.skipped)) == (1, {})
            assert dict(cache.metrics.observations) == {"admitted": 1}
            assert loop.runtime.sessions == set()  # delivered, then forgotten
            store = cache.store
            assert store is not None and store.unresolved_intents() == []
            # The next turn replays the block the first one admitted.
            history = [*HI, message, {"role": "user", "content": "more"}]
            again = await loop.post("/v1/chat/completions", {"model": "gpt-5", "messages": history})
            assert again.code == 200
            assert cache.metrics.replayed_blocks == 1

    run(test)


def test_a_failed_generation_s_session_is_aborted_and_forgotten(tmp_path: Path) -> None:
    async def test() -> None:
        async with loopback(tmp_path, **CACHE) as loop:
            loop.fake.enqueue({"http_error": {"status": 500, "type": "server_error",
                                              "message": "boom"}})  # fmt: skip
            answer = await loop.post("/v1/chat/completions", {"model": "gpt-5", "messages": HI})
            assert answer.code == 500
            assert loop.runtime.sessions == set()
            store = loop.runtime.cache.store
            assert store is not None
            assert store.unresolved_intents() == []  # resolved: its position poisoned instead
            assert store.stats()["markers"] == 1

    run(test)


def test_a_model_that_does_not_reason_gets_no_session(tmp_path: Path) -> None:
    async def test() -> None:
        async with loopback(tmp_path, **CACHE) as loop:
            answer = await loop.post("/v1/chat/completions", {"model": "gpt-4o", "messages": HI})
            assert answer.code == 200
            cache = loop.runtime.cache
            assert dict(cache.metrics.skipped) == {"not_a_reasoning_model": 1}
            store = cache.store
            assert store is not None and store.stats()["observations"] == 0
            body = loop.fake.requests[0].body
            assert "store" not in body and "include" not in body  # the caller's, untouched

    run(test)


def test_a_chat_provider_s_model_goes_to_that_provider(tmp_path: Path) -> None:
    async def test() -> None:
        async with loopback(tmp_path, **CACHE) as loop:
            # No messages: the Chat provider path refuses it in its own words.
            answer = await loop.post("/v1/chat/completions", {"model": "local/m", "input": "x"})
            assert answer.code == 400
            assert "provider 'local' speaks Chat Completions" in error_of(answer)["message"]
            assert loop.runtime.cache.metrics.requests == 0  # never offered to the cache
            assert loop.fake.requests == []

    run(test)
