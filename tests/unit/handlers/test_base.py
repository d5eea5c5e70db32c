"""relay.handlers.base: bearer auth, the OpenAI error envelope on every refusal, and the
headers every answer carries -- through a relay on a loopback port."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tornado.httpclient import AsyncHTTPClient, HTTPResponse

from tests.support.loopback import TOKEN, error_of, relay, run


async def fetch(url: str, method: str = "GET", body: bytes | None = None,
                auth: str | None = None) -> HTTPResponse:  # fmt: skip
    headers = {} if auth is None else {"Authorization": auth}
    client = AsyncHTTPClient(force_instance=True)
    try:
        return await client.fetch(url, method=method, body=body, headers=headers,
                                  raise_error=False, allow_nonstandard_methods=True)  # fmt: skip
    finally:
        client.close()


def test_a_missing_or_wrong_token_is_401_and_says_where_the_token_is(tmp_path: Path) -> None:
    async def test() -> None:
        async with relay(tmp_path, RELAY_TOKEN=TOKEN) as (_, base):
            for auth in (None, "Bearer wrong-token-0123456789", TOKEN):
                answer = await fetch(f"{base}/v1/models", auth=auth)
                assert answer.code == 401
                error = error_of(answer)
                assert (error["type"], error["code"]) == ("authentication_error", "invalid_api_key")
                assert "the value of RELAY_TOKEN" in error["message"]
                assert TOKEN not in answer.body.decode()

    run(test)


def test_a_generated_token_s_hint_names_its_file(tmp_path: Path) -> None:
    async def test() -> None:
        async with relay(tmp_path) as (_, base):
            error = error_of(await fetch(f"{base}/v1/models"))
            assert "in the file relay-token in the relay's data directory" in error["message"]
            token = (tmp_path / "data" / "relay-token").read_text().strip()
            ok = await fetch(f"{base}/v1/models", auth=f"Bearer {token}")
            assert ok.code == 200

    run(test)


def test_every_answer_carries_a_request_id_json_and_no_store(tmp_path: Path) -> None:
    async def test() -> None:
        async with relay(tmp_path, RELAY_TOKEN=TOKEN) as (_, base):
            ids = set()
            for path in ("/healthz", "/v1/models", "/nowhere"):
                answer = await fetch(base + path)
                assert answer.headers["Content-Type"] == "application/json"
                assert answer.headers["Cache-Control"] == "no-store"
                assert re.fullmatch(r"req_[0-9a-f]{24}", answer.headers["x-request-id"])
                ids.add(answer.headers["x-request-id"])
            assert len(ids) == 3

    run(test)


def test_health_needs_no_token_and_an_unknown_route_is_a_404_envelope(tmp_path: Path) -> None:
    async def test() -> None:
        async with relay(tmp_path, RELAY_TOKEN=TOKEN) as (_, base):
            health = await fetch(f"{base}/healthz")
            assert (health.code, json.loads(health.body)) == (200, {"status": "ok"})
            missing = await fetch(f"{base}/v1/embeddings", "POST", b"{}")  # no token either
            assert missing.code == 404
            error = error_of(missing)
            assert error["code"] == "not_found"
            assert error["message"].startswith("no route POST /v1/embeddings; the relay serves")

    run(test)


def test_a_method_a_route_does_not_take_is_a_405_envelope(tmp_path: Path) -> None:
    async def test() -> None:
        async with relay(tmp_path, RELAY_TOKEN=TOKEN) as (_, base):
            answer = await fetch(f"{base}/healthz", "DELETE", auth=f"Bearer {TOKEN}")
            assert answer.code == 405
            error = error_of(answer)
            assert error["code"] == "method_not_allowed"
            assert error["message"] == "DELETE is not allowed on /healthz"

    run(test)


def test_a_relay_shutting_down_refuses_new_work_with_503(tmp_path: Path) -> None:
    async def test() -> None:
        async with relay(tmp_path, RELAY_TOKEN=TOKEN) as (server, base):
            assert server.runtime is not None
            server.runtime.shutting_down = True
            answer = await fetch(f"{base}/v1/models", auth=f"Bearer {TOKEN}")
            assert answer.code == 503
            assert error_of(answer)["code"] == "shutting_down"
            unauthorized = await fetch(f"{base}/v1/models")  # the token is checked first
            assert unauthorized.code == 401

    run(test)
