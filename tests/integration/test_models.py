"""GET /v1/models: the relay's aliases plus the upstream's own models, over real sockets.

First :func:`relay.upstream.models.fetch_models` against a loopback upstream that answers
well, badly or not at all; then the relay with the fake upstream (and with its embedded
fake), listed by the official openai SDK with strict response validation.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import pytest
import requests
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets
from tornado.web import Application, RequestHandler

from fakeupstream.models import MODELS
from relay.app.server import RelayServer
from relay.clock import SystemClock
from relay.settings.config import load_config
from relay.transport.upstream import make_http_client
from relay.upstream.models import ModelsUnavailable, fetch_models
from tests.support.stack import TOKEN, UPSTREAM_KEY, LoopThread, Stack, running_stack

LISTING = {
    "object": "list",
    "data": [
        {"id": "gpt-5", "object": "model", "created": 1754425777, "owned_by": "system"},
        {"id": "o3", "object": "model", "created": 1744225308, "owned_by": "system"},
    ],
}
KEY_HEADERS = {"Authorization": "Bearer sk-models-key", "Accept": "application/json"}
ALIASES = json.dumps({"gpt-high": {"model": "gpt-5", "reasoning_effort": "high"}, "fast": "o3"})
FAKE_IDS = sorted(MODELS)


# --- fetch_models against a scripted loopback upstream ------------------------------------


class Upstream(RequestHandler):
    """``/<behaviour>/models``; every request's headers are kept in ``seen``."""

    def initialize(self, seen: list[dict[str, str]], release: asyncio.Event) -> None:
        self.seen = seen
        self.release = release

    async def get(self, behaviour: str) -> None:
        self.seen.append(dict(self.request.headers))
        if behaviour == "ok":
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps(LISTING))
        elif behaviour == "unauthorized":
            self.set_status(401)
            self.finish({"error": {"message": "Incorrect API key", "code": "invalid_api_key"}})
        elif behaviour == "html":
            self.set_status(200)
            self.finish("<html>maintenance</html>")
        elif behaviour == "large":
            self.finish(json.dumps({"data": [{"id": "m" * 100}] * 1000}))
        elif behaviour == "redirect":
            self.redirect("/ok/models")
        elif behaviour == "hang":
            await self.release.wait()


async def with_upstream(test: Callable[[str, list[dict[str, str]]], Awaitable[None]]) -> None:
    seen: list[dict[str, str]] = []
    release = asyncio.Event()
    app = Application([(r"/(\w+)/models", Upstream, {"seen": seen, "release": release})])
    sockets = bind_sockets(0, "127.0.0.1", family=socket.AF_INET)
    server = HTTPServer(app)
    server.add_sockets(sockets)
    try:
        await test(f"http://127.0.0.1:{sockets[0].getsockname()[1]}", seen)
    finally:
        release.set()
        server.stop()
        await server.close_all_connections()


def test_fetch_reads_the_list_with_the_upstream_key_on_a_kept_connection() -> None:
    async def test(root: str, seen: list[dict[str, str]]) -> None:
        client = make_http_client(SystemClock())
        try:
            for _ in range(2):
                models = await fetch_models(
                    client, SystemClock(), root + "/ok/models", KEY_HEADERS, max_bytes=4096
                )
                assert [m.id for m in models] == ["gpt-5", "o3"]
            assert client.pool.reused == 1
        finally:
            client.close()
        assert [h["Authorization"] for h in seen] == ["Bearer sk-models-key"] * 2
        assert seen[0]["Accept"] == "application/json"

    asyncio.run(with_upstream(test))


@pytest.mark.parametrize(
    ("path", "kwargs", "reason", "status"),
    [
        ("/unauthorized/models", {}, "http_status", 401),
        ("/redirect/models", {}, "http_status", 302),  # not followed: the key stays put
        ("/html/models", {}, "malformed", 200),
        ("/no/such/models", {}, "http_status", 404),
        ("/large/models", {"max_bytes": 4096}, "too_large", None),
        ("/hang/models", {"timeout_s": 0.2}, "timeout", None),
    ],
)
def test_fetch_failures_have_a_reason(
    path: str, kwargs: dict[str, Any], reason: str, status: int | None
) -> None:
    async def test(root: str, seen: list[dict[str, str]]) -> None:
        client = make_http_client(SystemClock())
        try:
            with pytest.raises(ModelsUnavailable) as failure:
                fetch = fetch_models(
                    client,
                    SystemClock(),
                    root + path,
                    KEY_HEADERS,
                    **{"max_bytes": 1 << 20, **kwargs},
                )
                await asyncio.wait_for(fetch, 10)  # a missing deadline fails, never hangs
        finally:
            client.close()
        assert (failure.value.reason, failure.value.status) == (reason, status)

    asyncio.run(with_upstream(test))


def test_fetch_from_a_closed_port_is_unreachable() -> None:
    async def test() -> None:
        client = make_http_client(SystemClock())
        try:
            with pytest.raises(ModelsUnavailable) as failure:
                await fetch_models(
                    client, SystemClock(), closed_port_url(), KEY_HEADERS, max_bytes=4096
                )
        finally:
            client.close()
        assert failure.value.reason == "unreachable"

    asyncio.run(test())


def closed_port_url() -> str:
    """A loopback URL nothing listens on: the discard port, privileged, so never handed out
    by bind(0), unlike a just-released port another test (or xdist worker) may take."""
    return "http://127.0.0.1:9/v1/models"


# --- the relay, listed by the openai SDK ---------------------------------------------------


def listed(stack: Stack) -> list[str]:
    page = stack.openai().models.list()
    for model in page.data:
        assert model.object == "model"
    return [model.id for model in page.data]


def test_aliases_then_the_fake_upstreams_models(tmp_path: Path) -> None:
    with running_stack(tmp_path, {"RELAY_MODEL_ALIASES": ALIASES}) as stack:
        assert listed(stack) == ["fast", "gpt-high", *FAKE_IDS]
        owners = {m.id: m.owned_by for m in stack.openai().models.list().data}
        assert owners["gpt-high"] == "relay" and owners["gpt-5"] == "system"
        assert stack.fake.models_listed == 1  # the second listing came from the cache


def test_without_aliases_the_upstreams_models_tell_a_new_user_the_names(
    stack: Stack,
) -> None:
    assert listed(stack) == FAKE_IDS
    # and each listed name works as a model name
    stack.script({"output": [{"type": "message", "text": "ok"}]})
    reply = stack.openai().chat.completions.create(
        model=FAKE_IDS[0], messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.choices[0].message.content == "ok"


def test_upstream_down_lists_the_aliases_with_200(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    base = closed_port_url().removesuffix("/models")
    env = {"RELAY_MODEL_ALIASES": ALIASES, "OPENAI_BASE_URL": base}
    with caplog.at_level(logging.INFO, logger="relay"), running_stack(tmp_path, env) as stack:
        answer = requests.get(f"{stack.base_url}/models", headers=stack.headers(), timeout=10)
        assert answer.status_code == 200
        assert [m["id"] for m in answer.json()["data"]] == ["fast", "gpt-high"]
        assert listed(stack) == ["fast", "gpt-high"]  # within the retry interval: no refetch
    failures = [r.getMessage() for r in caplog.records if "models_upstream" in r.getMessage()]
    assert len(failures) == 1
    assert failures[0].startswith("models_upstream_unavailable reason=unreachable")
    assert all(UPSTREAM_KEY not in r.getMessage() for r in caplog.records)


def test_a_rejected_upstream_key_lists_the_aliases(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.INFO, logger="relay"),
        running_stack(tmp_path, {"RELAY_MODEL_ALIASES": ALIASES}) as stack,
    ):
        stack.fake.api_keys = frozenset({"sk-another-key"})
        assert listed(stack) == ["fast", "gpt-high"]
        assert stack.fake.models_listed == 0
    [line] = [r.getMessage() for r in caplog.records if "models_upstream" in r.getMessage()]
    assert "reason=http_status status=401" in line
    assert UPSTREAM_KEY not in line


def test_the_embedded_fake_lists_its_models(tmp_path: Path) -> None:
    with (
        embedded_relay(tmp_path) as base_url,
        openai.OpenAI(
            base_url=base_url, api_key=TOKEN, max_retries=0, _strict_response_validation=True
        ) as client,
    ):
        assert [m.id for m in client.models.list().data] == FAKE_IDS


@contextmanager
def embedded_relay(data_dir: Path) -> Iterator[str]:
    """A relay without OPENAI_API_KEY: it answers from its in-process fake."""
    config = load_config({"RELAY_PORT": "0", "RELAY_TOKEN": TOKEN, "RELAY_DATA_DIR": str(data_dir)})
    assert config.uses_embedded_fake
    loop = LoopThread()
    relay = RelayServer(config)
    try:
        loop.run(relay.start())
        try:
            yield f"http://127.0.0.1:{relay.port}/v1"
        finally:
            loop.run(relay.stop())
    finally:
        loop.close()


# --- one model, and the providers' models ---------------------------------------------


def test_retrieve_an_alias_an_upstream_model_and_a_provider_model(tmp_path: Path) -> None:
    env = {"RELAY_MODEL_ALIASES": ALIASES}
    with running_stack(tmp_path, env, providers={"ds": {"kind": "chat"}}) as stack:
        client = stack.openai()
        ids = listed(stack)
        assert ids == ["fast", "gpt-high", *FAKE_IDS, *(f"ds/{m}" for m in FAKE_IDS)]
        alias = client.models.retrieve("gpt-high")
        assert (alias.id, alias.owned_by, alias.object) == ("gpt-high", "relay", "model")
        upstream = client.models.retrieve("gpt-5")
        assert (upstream.id, upstream.owned_by) == ("gpt-5", "system")
        provider = client.models.retrieve("ds/gpt-5")  # the "/" stays part of the id
        assert (provider.id, provider.owned_by) == ("ds/gpt-5", "system")
        with pytest.raises(openai.NotFoundError) as missing:
            client.models.retrieve("no-such-model")
        envelope = missing.value.body
        assert isinstance(envelope, dict)
        assert envelope["code"] == "model_not_found" and envelope["param"] == "model"
        assert envelope["type"] == "invalid_request_error"
        assert envelope["message"].startswith("the model 'no-such-model' is not listed")
        # A listed provider model routes to that provider.
        reply = client.chat.completions.create(
            model="ds/gpt-5", messages=[{"role": "user", "content": "hi"}]
        )
        assert reply.choices[0].message.content
        assert stack.fake.requests[-1].path.endswith("/chat/completions")


def test_a_provider_that_cannot_list_leaves_the_rest(tmp_path: Path) -> None:
    base = closed_port_url().removesuffix("/models")
    providers = {"down": {"kind": "chat", "base_url": base}}
    with running_stack(tmp_path, providers=providers) as stack:
        assert listed(stack) == FAKE_IDS
