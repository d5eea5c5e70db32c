"""relay.app.server: start (with the offline upstream when there is no key), the banner, and
shutdown in order -- in-process, on real loopback sockets, SQLite files and the real
offline fake (``relay serve`` as a process is tested in tests/integration/test_cli.py)."""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import stat
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, cast

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from relay.app.offline import load_offline_upstream
from relay.app.server import RelayServer, serve_forever
from relay.errors import ConfigError, ListenError, StoreError, StoreLocked
from relay.http.routes import ROUTES
from relay.settings.config import load_config

TOKEN = "rr-test-token-0123456789"


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


def config(tmp_path: Path, **env: str) -> Any:
    return load_config({"RELAY_PORT": "0", "RELAY_DATA_DIR": str(tmp_path / "data"), **env})


async def get(url: str, **headers: str) -> tuple[int, Any]:
    client = AsyncHTTPClient(force_instance=True)
    try:
        answer = await client.fetch(url, headers=headers, raise_error=False)
        return answer.code, json.loads(answer.body) if answer.body else None
    finally:
        client.close()


def test_without_a_key_it_serves_from_the_offline_fake_and_says_so(tmp_path: Path) -> None:
    async def test() -> None:
        server = RelayServer(config(tmp_path), offline=load_offline_upstream())
        port = await server.start()
        try:
            assert server.fake is not None
            token_file = tmp_path / "data" / "relay-token"
            assert server.banner() == [
                f"relay listening on http://127.0.0.1:{port}/v1",
                "upstream: OFFLINE FAKE (no OPENAI_API_KEY set) - answers come from the "
                f"built-in fake Responses API at {server.fake.base_url}, not from a real model",
                f"data directory: {tmp_path / 'data'}",
                f"relay token: generated a new relay token in {token_file} (send it as a "
                "Bearer token)",
                "reasoning cache: off (REASONING_CACHE_ENABLED=1 turns it on)",
                f"admin socket: {tmp_path / 'data' / 'run' / 'admin.sock'} (relay status, "
                "relay admin ...)",
            ]
            assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
            assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
            assert await get(f"http://127.0.0.1:{port}/healthz") == (200, {"status": "ok"})
            token = token_file.read_text().strip()
            code, models = await get(f"http://127.0.0.1:{port}/v1/models",
                                     Authorization=f"Bearer {token}")  # fmt: skip
            assert code == 200 and models["object"] == "list"  # answered from the fake
            fake_url = server.fake.base_url
        finally:
            await server.stop()
        with pytest.raises((ConnectionError, HTTPClientError, OSError)):
            await AsyncHTTPClient(force_instance=True).fetch(fake_url + "/models")

    run(test)


def test_with_a_key_the_banner_names_the_upstream_the_token_the_cache_and_providers(
    tmp_path: Path,
) -> None:
    providers = {"deepseek": {"kind": "chat", "base_url": "https://api.deepseek.com/v1",
                              "api_key_env": "DEEPSEEK_KEY", "strict": True}}  # fmt: skip

    async def test() -> None:
        cfg = config(tmp_path, OPENAI_API_KEY="sk-x", OPENAI_BASE_URL="http://127.0.0.1:9/v1",
                     RELAY_TOKEN=TOKEN, REASONING_CACHE_ENABLED="1", DEEPSEEK_KEY="sk-ds",
                     RELAY_PROVIDERS=json.dumps(providers))  # fmt: skip
        server = RelayServer(cfg)
        port = await server.start()
        try:
            assert server.fake is None and server.token_path is None
            assert server.banner() == [
                f"relay listening on http://127.0.0.1:{port}/v1",
                "upstream: http://127.0.0.1:9/v1/responses",
                "provider deepseek: chat at https://api.deepseek.com/v1/chat/completions "
                "(key from DEEPSEEK_KEY, strict true)",
                f"data directory: {tmp_path / 'data'}",
                "relay token: RELAY_TOKEN from the environment",
                f"reasoning cache: on ({tmp_path / 'data' / 'reasoning-cache.sqlite'}); "
                "up to 10 cache sessions at once",
                f"admin socket: {tmp_path / 'data' / 'run' / 'admin.sock'} (relay status, "
                "relay admin ...)",
            ]
            assert not (tmp_path / "data" / "relay-token").exists()
            assert "sk-x" not in "\n".join(server.banner())
        finally:
            await server.stop()

    run(test)


def test_stopping_releases_the_cache_for_the_next_relay(tmp_path: Path) -> None:
    async def test() -> None:
        # Without the admin socket, which would refuse the second relay first (below).
        cfg = config(tmp_path, OPENAI_API_KEY="sk-x", RELAY_TOKEN=TOKEN,
                     REASONING_CACHE_ENABLED="1", RELAY_ADMIN_SOCKET="off")  # fmt: skip
        first = RelayServer(cfg)
        await first.start()
        with pytest.raises(StoreLocked):
            await RelayServer(cfg).start()  # one relay process owns the cache at a time
        await first.stop()
        second = RelayServer(cfg)
        await second.start()
        await second.stop()

    run(test)


# Tornado's bind_sockets leaves its socket unclosed when bind fails: collected here.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_port_in_use_releases_the_cache_before_it_fails(tmp_path: Path) -> None:
    async def test() -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            cfg = config(tmp_path, OPENAI_API_KEY="sk-x", RELAY_TOKEN=TOKEN,
                         REASONING_CACHE_ENABLED="1", RELAY_PORT=str(taken.getsockname()[1]))  # fmt: skip
            with pytest.raises(OSError):
                await RelayServer(cfg).start()
        gc.collect()
        retry = RelayServer(config(tmp_path, OPENAI_API_KEY="sk-x", RELAY_TOKEN=TOKEN,
                                   REASONING_CACHE_ENABLED="1"))  # fmt: skip
        await retry.start()  # the lock was released: a retry can own the cache
        await retry.stop()

    run(test)


def test_a_failed_start_stops_the_offline_fake_it_had_started(tmp_path: Path) -> None:
    started: list[Any] = []
    factory = load_offline_upstream()

    def recording(**kwargs: Any) -> Any:
        started.append(fake := factory(**kwargs))
        return fake

    async def test() -> None:
        data = tmp_path / "data"
        data.mkdir(mode=0o700)
        # A latched store stops startup after the fake has started (it is opened later).
        (data / "reasoning-cache.sqlite.guard").write_text('{"what": "x", "code": "y"}\n')
        server = RelayServer(config(tmp_path, REASONING_CACHE_ENABLED="1"), offline=recording)
        with pytest.raises(StoreError):
            await server.start()
        [fake] = started
        with pytest.raises((ConnectionError, HTTPClientError, OSError)):
            await AsyncHTTPClient(force_instance=True).fetch(fake.base_url + "/models")
        assert server.runtime is None and server.fake is None and server.port is None
        assert not (data / "run" / "admin.sock").exists()  # the bound socket was removed
        await server.stop()  # nothing to stop: a no-op, not a second close

    run(test)


@pytest.mark.parametrize("setting", ["RELAY_PORT", "RELAY_METRICS_PORT"])
def test_a_port_in_use_stops_startup_before_anything_is_written(
    tmp_path: Path, setting: str
) -> None:
    """Every listener binds first: the store is neither created nor opened, the token is
    not written, the fake not started, and the error names the address and the setting."""
    started: list[Any] = []

    async def test() -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            cfg = config(tmp_path, REASONING_CACHE_ENABLED="1", **{setting: str(port)})
            server = RelayServer(cfg, offline=cast(Any, lambda **kw: started.append(kw)))
            with pytest.raises(ListenError) as err:
                await server.start()
        assert str(err.value) == f"127.0.0.1:{port} is in use ({setting})"
        assert sorted(p.name for p in (tmp_path / "data").iterdir()) == []
        assert started == [] and server.runtime is None

    run(test)


def test_the_default_admin_socket_refuses_a_second_relay_on_the_same_data_dir(
    tmp_path: Path,
) -> None:
    async def test() -> None:
        cfg = config(tmp_path, OPENAI_API_KEY="sk-x", RELAY_TOKEN=TOKEN,
                     REASONING_CACHE_ENABLED="1")  # fmt: skip
        first = RelayServer(cfg)
        await first.start()
        try:
            store = cfg.cache_path.read_bytes()
            with pytest.raises(ListenError, match="is a relay already running with the data "
                               f"directory {tmp_path / 'data'}"):  # fmt: skip
                await RelayServer(cfg).start()
            assert cfg.cache_path.read_bytes() == store  # refused before the store
        finally:
            await first.stop()

    run(test)


def test_serve_forever_stops_the_server_when_the_banner_cannot_be_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def closed_stdout(*args: object, **kwargs: object) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("builtins.print", closed_stdout)

    async def test() -> None:
        server = RelayServer(config(tmp_path, OPENAI_API_KEY="sk-x", RELAY_TOKEN=TOKEN,
                                    REASONING_CACHE_ENABLED="1"))  # fmt: skip
        with pytest.raises(BrokenPipeError):
            await serve_forever(server, asyncio.Event())
        assert server.runtime is not None and server.runtime.shutting_down
        again = RelayServer(server.config)
        await again.start()  # the store was closed: its lock is free
        await again.stop()

    run(test)


def test_serve_forever_prints_the_banner_and_stops_when_told(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def test() -> None:
        server = RelayServer(config(tmp_path, OPENAI_API_KEY="sk-x", RELAY_TOKEN=TOKEN))
        stop = asyncio.Event()
        settled: list[int | None] = []  # the port when settled() ran: after start, once
        serving = asyncio.ensure_future(
            serve_forever(server, stop, settled=lambda: settled.append(server.port))
        )
        while server.port is None or not capsys.readouterr().out:  # noqa: ASYNC110 - polls stdout
            await asyncio.sleep(0.01)
        assert settled == [server.port]
        assert server.runtime is not None and not server.runtime.shutting_down
        stop.set()
        await asyncio.wait_for(serving, timeout=10)
        assert server.runtime.shutting_down

    run(test)


def test_each_route_reaches_its_handler_and_anything_else_is_no_route(tmp_path: Path) -> None:
    """Every path of relay.http.routes' table is served (none answers "no route"); the 404 lists
    them all, from the same table."""

    async def test() -> None:
        server = RelayServer(config(tmp_path, OPENAI_API_KEY="sk-x", RELAY_TOKEN=TOKEN,
                                   OPENAI_BASE_URL="http://127.0.0.1:9/v1"))  # fmt: skip
        port = await server.start()
        auth = {"Authorization": f"Bearer {TOKEN}"}
        try:
            for route in ROUTES:
                path = route.path.replace("{id}", "gpt-5")
                code, body = await get(f"http://127.0.0.1:{port}{path}", **auth)
                message = (body or {}).get("error", {}).get("message", "")
                assert not message.startswith("no route"), (path, code, body)
            code, body = await get(f"http://127.0.0.1:{port}/v2/chat/completions", **auth)
            assert code == 404
            assert body["error"]["message"] == (
                "no route GET /v2/chat/completions; the relay serves POST /v1/chat/completions, "
                "POST /chat/completions, POST /v1/responses, POST /responses, GET /v1/models, "
                "GET /v1/models/{id}, GET/DELETE /api/cache/reasoning, GET /healthz, GET /readyz"
            )
        finally:
            await server.stop()

    run(test)


def test_a_data_dir_too_long_for_the_default_socket_starts_without_it(tmp_path: Path) -> None:
    data = tmp_path / ("d" * 100)

    async def test() -> None:
        server = RelayServer(load_config({"RELAY_PORT": "0", "RELAY_DATA_DIR": str(data),
                                          "OPENAI_API_KEY": "sk-x", "RELAY_TOKEN": TOKEN}))  # fmt: skip
        await server.start()
        try:
            sock = data / "run" / "admin.sock"
            assert server.ops is not None and server.ops.admin is None
            assert (
                f"admin socket: off ({sock} is longer than a Unix socket path may be; set "
                "RELAY_ADMIN_SOCKET to a shorter path)"
            ) in server.banner()
        finally:
            await server.stop()
        # Named explicitly, the same path is a configuration error.
        explicit = load_config({"RELAY_PORT": "0", "RELAY_DATA_DIR": str(data),
                                "OPENAI_API_KEY": "sk-x", "RELAY_TOKEN": TOKEN,
                                "RELAY_ADMIN_SOCKET": str(data / "run" / "a.sock")})  # fmt: skip
        with pytest.raises(ConfigError, match="longer than a Unix socket path may be"):
            await RelayServer(explicit).start()

    run(test)
