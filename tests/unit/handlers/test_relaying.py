"""relay.handlers.relaying: the request body is read within RELAY_MAX_REQUEST_BYTES (a
declared length refused before any byte is read, a chunked upload as it arrives) and
parsed as one JSON object -- through a relay on a loopback port."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tornado.httpclient import AsyncHTTPClient, HTTPResponse

from relay.handlers.relaying import _declares_more, _too_large
from tests.support.loopback import TOKEN, error_of, relay, run

LIMIT = 2048


@pytest.mark.parametrize(
    ("declared", "more"),
    [
        ("2048", False), ("2049", True), ("0", False), ("  2049 ", True),
        ("0002049", True), ("0" * 5000 + "1", False), ("9" * 5000, True),
        ("", False), ("-1", False), ("+5000", False), ("12a", False), ("²⁰⁴⁹", False),
        ("4096, 4096", False),
    ],
)  # fmt: skip
def test_what_counts_as_declaring_more_than_the_limit(declared: str, more: bool) -> None:
    # Only plain ASCII digits count: Tornado itself refuses any other Content-Length.
    assert _declares_more(declared, LIMIT) is more


@given(st.integers(min_value=0, max_value=10**40), st.integers(min_value=1, max_value=10**12),
       st.integers(min_value=0, max_value=3))  # fmt: skip
def test_a_digit_string_declares_more_exactly_when_its_number_is_larger(
    value: int, limit: int, zeros: int
) -> None:
    assert _declares_more("0" * zeros + str(value), limit) is (value > limit)


def test_the_refusal_names_the_setting_and_the_limit() -> None:
    message = _too_large(LIMIT)
    assert "RELAY_MAX_REQUEST_BYTES (2048 bytes)" in message


def chat(size: int) -> bytes:
    """A chat request body of exactly ``size`` bytes."""
    head, tail = b'{"model": "gpt-5", "messages": [{"role": "user", "content": "', b'"}]}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


async def post(url: str, body: bytes) -> HTTPResponse:
    client = AsyncHTTPClient(force_instance=True)
    try:
        return await client.fetch(url, method="POST", body=body, raise_error=False,
                                  headers={"Authorization": f"Bearer {TOKEN}",
                                           "Content-Type": "application/json"})  # fmt: skip
    finally:
        client.close()


async def raw_exchange(port: int, request: bytes) -> bytes:
    """Send ``request`` as written and read until the relay closes or 2 s pass."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = await asyncio.wait_for(reader.read(65536), 2)
            if not chunk:
                break
            answer += chunk
        return answer
    finally:
        writer.close()


def test_a_declared_length_over_the_limit_is_413_before_the_body_is_read(tmp_path: Path) -> None:
    async def test() -> None:
        env = {"RELAY_TOKEN": TOKEN, "RELAY_MAX_REQUEST_BYTES": str(LIMIT)}
        async with relay(tmp_path, **env) as (_, base):
            port = int(base.rsplit(":", 1)[1])
            # Headers only: the relay must answer without waiting for the body.
            head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                    f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {LIMIT + 1}\r\n\r\n").encode()  # fmt: skip
            answer = await raw_exchange(port, head)
            assert answer.startswith(b"HTTP/1.1 413 ")
            assert b'"request_too_large"' in answer and b"RELAY_MAX_REQUEST_BYTES" in answer

    run(test)


def test_a_chunked_upload_is_refused_once_it_passes_the_limit(tmp_path: Path) -> None:
    async def test() -> None:
        env = {"RELAY_TOKEN": TOKEN, "RELAY_MAX_REQUEST_BYTES": str(LIMIT)}
        async with relay(tmp_path, **env) as (_, base):
            port = int(base.rsplit(":", 1)[1])
            body = chat(LIMIT + 100)
            chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i : i + 512]), body[i : i + 512])
                              for i in range(0, len(body), 512))  # fmt: skip
            request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                       f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                       f"Transfer-Encoding: chunked\r\n\r\n").encode() + chunks + b"0\r\n\r\n"  # fmt: skip
            answer = await raw_exchange(port, request)
            assert answer.startswith(b"HTTP/1.1 413 ")
            assert b'"request_too_large"' in answer

    run(test)


@pytest.mark.parametrize(
    ("body", "code"),
    [(b"", "invalid_request"), (b"[1, 2]", "invalid_request"), (b'{"a": NaN}', "invalid_request"),
     (b"\xff{}", "invalid_request")],
)  # fmt: skip
def test_a_body_that_is_not_one_json_object_is_a_400(
    tmp_path: Path, body: bytes, code: str
) -> None:
    async def test() -> None:
        async with relay(tmp_path, RELAY_TOKEN=TOKEN) as (_, base):
            answer = await post(f"{base}/v1/chat/completions", body)
            assert answer.code == 400
            assert error_of(answer)["code"] == code

    run(test)


def test_a_body_at_the_limit_is_read_whole(tmp_path: Path) -> None:
    async def test() -> None:
        # The upstream (port 9) is unreachable: an answer saying so means the whole body
        # was read, parsed and translated.
        env = {"RELAY_TOKEN": TOKEN, "RELAY_MAX_REQUEST_BYTES": str(LIMIT)}
        async with relay(tmp_path, **env) as (_, base):
            answer = await post(f"{base}/v1/chat/completions", chat(LIMIT))
            assert (answer.code, error_of(answer)["code"]) == (502, "bad_gateway")

    run(test)
