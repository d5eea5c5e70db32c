"""relay.handlers.chat_provider: what a Chat Completions provider is sent (the provider's
model, the alias defaults, the prepared messages) and what is refused before anything is
sent -- the body function directly, the handler through a relay on a loopback port with a
loopback Chat upstream that records what it receives."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import tornado.web
from hypothesis import given
from hypothesis import strategies as st
from tornado.httpclient import AsyncHTTPClient, HTTPResponse
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from relay.handlers.chat_provider import outgoing_body
from relay.settings.model_alias import ModelAlias
from tests.support.loopback import TOKEN, error_of, relay, run

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("body", "alias", "expected"),
    [
        ({"model": "p/m", "stream": True}, ModelAlias("p/m", "m", provider="p"),
         {"model": "m", "stream": True}),
        ({"model": "fast", "temperature": 0.2, "top_p": 0.9},
         ModelAlias("fast", "m", sampling="drop", provider="p"), {"model": "m"}),
        ({"model": "fast", "temperature": 0.2},
         ModelAlias("fast", "m", sampling="forward", provider="p"),
         {"model": "m", "temperature": 0.2}),
        ({"model": "deep"}, ModelAlias("deep", "m", reasoning_effort="high", provider="p"),
         {"model": "m", "reasoning_effort": "high"}),
        ({"model": "deep", "reasoning_effort": "low"},
         ModelAlias("deep", "m", reasoning_effort="high", provider="p"),
         {"model": "m", "reasoning_effort": "low"}),  # the client's own effort wins
        ({"model": "deep", "reasoning_effort": None},
         ModelAlias("deep", "m", reasoning_effort="high", provider="p"),
         {"model": "m", "reasoning_effort": "high"}),  # null: as if not sent
    ],
)  # fmt: skip
def test_the_provider_s_body(
    body: dict[str, Any], alias: ModelAlias, expected: dict[str, Any]
) -> None:
    sent = {**body, "messages": [{"role": "user", "content": "as sent"}]}
    assert outgoing_body(sent, alias, MESSAGES) == {**expected, "messages": MESSAGES}
    assert sent["messages"] == [{"role": "user", "content": "as sent"}]  # input untouched


@given(
    st.dictionaries(
        st.sampled_from(["temperature", "top_p", "stream", "user", "tools", "n"]),
        st.integers() | st.text(max_size=5),
        max_size=6,
    ),
    st.sampled_from(["auto", "forward", "drop"]),
)
def test_only_the_model_messages_effort_and_dropped_sampling_change(
    extra: dict[str, Any], sampling: str
) -> None:
    body = {"model": "alias", "messages": [], **extra}
    out = outgoing_body(body, ModelAlias("alias", "upstream", sampling=sampling), MESSAGES)
    dropped = {"temperature", "top_p"} if sampling == "drop" else set()
    assert out == {**{k: v for k, v in extra.items() if k not in dropped},
                   "model": "upstream", "messages": MESSAGES}  # fmt: skip


class Recording(tornado.web.RequestHandler):
    def initialize(self, seen: list[dict[str, Any]]) -> None:
        self.seen = seen

    def post(self) -> None:
        self.seen.append(json.loads(self.request.body))
        self.set_header("Content-Type", "application/json")
        self.finish({
            "id": "chatcmpl-up", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "hello"}}],
        })  # fmt: skip


@asynccontextmanager
async def chat_upstream() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []
    app = tornado.web.Application([(r"/v1/chat/completions", Recording, {"seen": seen})])
    sockets = bind_sockets(0, "127.0.0.1")
    server = HTTPServer(app)
    server.add_sockets(sockets)
    try:
        yield f"http://127.0.0.1:{sockets[0].getsockname()[1]}/v1", seen
    finally:
        server.stop()
        await server.close_all_connections()


async def post(url: str, body: dict[str, Any]) -> HTTPResponse:
    client = AsyncHTTPClient(force_instance=True)
    try:
        return await client.fetch(url, method="POST", body=json.dumps(body), raise_error=False,
                                  headers={"Authorization": f"Bearer {TOKEN}",
                                           "Content-Type": "application/json"})  # fmt: skip
    finally:
        client.close()


def provider_env(base_url: str) -> dict[str, str]:
    providers = {"local": {"kind": "chat", "base_url": base_url, "api_key_env": "LOCAL_KEY",
                           "strict": False}}  # fmt: skip
    aliases = {
        "deep": {"model": "m", "provider": "local", "reasoning_effort": "high", "sampling": "drop"}
    }
    return {"RELAY_TOKEN": TOKEN, "RELAY_PROVIDERS": json.dumps(providers),
            "LOCAL_KEY": "sk-local", "RELAY_MODEL_ALIASES": json.dumps(aliases)}  # fmt: skip


def test_the_provider_gets_its_model_and_the_alias_defaults(tmp_path: Path) -> None:
    async def test() -> None:
        async with chat_upstream() as (url, seen), relay(tmp_path, **provider_env(url)) as (
            _, base,
        ):  # fmt: skip
            body = {"model": "deep", "messages": MESSAGES, "temperature": 0.5}
            answer = await post(f"{base}/v1/chat/completions", body)
            assert answer.code == 200, answer.body
            completion = json.loads(answer.body)
            assert completion["model"] == "deep"  # echoed as the client named it
            assert completion["choices"][0]["message"]["content"] == "hello"
            assert seen == [{"model": "m", "messages": MESSAGES, "reasoning_effort": "high"}]

    run(test)


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ({"model": "local/m"}, "messages", "provider 'local' speaks Chat Completions"),
        ({"model": "local/m", "messages": "hi"}, "messages", "an array of chat messages"),
        ({"model": "local/m", "messages": MESSAGES, "user": 7}, "user", "'user' must be a string"),
    ],
)  # fmt: skip
def test_a_request_the_provider_cannot_take_is_refused_before_it_is_sent(
    tmp_path: Path, body: dict[str, Any], param: str, says: str
) -> None:
    async def test() -> None:
        async with chat_upstream() as (url, seen), relay(tmp_path, **provider_env(url)) as (
            _, base,
        ):  # fmt: skip
            answer = await post(f"{base}/v1/chat/completions", body)
            assert answer.code == 400
            error = error_of(answer)
            assert (error["param"], error["code"]) == (param, "invalid_request")
            assert says in error["message"]
            assert seen == []

    run(test)
