"""Bad client input never crashes the relay and always gets a clear OpenAI-shaped 4xx."""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import socket
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.support.raw_http import exchange, read_answers
from tests.support.stack import Stack

GOOD = {"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]}


def post(
    stack: Stack, body: bytes, content_type: str | None = "application/json"
) -> requests.Response:
    headers = stack.headers()
    if content_type is None:
        headers.pop("Content-Type")
    else:
        headers["Content-Type"] = content_type
    return requests.post(
        f"{stack.base_url}/chat/completions", data=body, headers=headers, timeout=10
    )


def assert_envelope(resp: requests.Response, status: int, *needles: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    err: dict[str, Any] = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    for needle in needles:
        assert needle in err["message"], err["message"]
    return err


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "JSON object, not a JSON array"),
        (b'"text"', 400, "JSON object, not a JSON string"),
        (b"", 400, "empty"),
        (b'{"model": "gpt-5"}', 400, "messages"),
        (b'{"model": "gpt-5", "messages": [{"role": "wizard", "content": "x"}]}', 400, "role"),
        (b'{"model": "gpt-5", "messages": "hi"}', 400, "messages"),
        (b'{"messages": [{"role": "user", "content": "x"}]}', 400, "model"),
        (b"\xff\xfe{}", 400, "UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, 400, "nested too deeply"),
        (
            b'{"model": "gpt-5", "messages": [{"role": "user", "content": "x"}], "x": NaN}',
            400,
            "NaN",
        ),
        (json.dumps({**GOOD, "n": 3}).encode(), 400, "n"),
        (json.dumps({**GOOD, "stop": ["x"]}).encode(), 400, "stop"),
    ],
)
def test_bad_bodies_get_clear_400(stack: Stack, body: bytes, status: int, needle: str) -> None:
    assert_envelope(post(stack, body), status, needle)
    # The relay is still serving after every bad request.
    assert requests.get(f"{stack.base_url[:-3]}/healthz", timeout=5).status_code == 200


def test_wrong_content_type_is_415(stack: Stack) -> None:
    assert_envelope(post(stack, json.dumps(GOOD).encode(), "text/plain"), 415, "application/json")


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("gzip", False),  # plain JSON declared gzip: it used to pass
        ("gzip", True),  # real gzip: it used to be "not valid UTF-8"
        ("deflate", True),
        ("identity, br", False),
    ],
)
def test_a_declared_content_encoding_is_415_naming_it(
    stack: Stack, encoding: str, compress: bool
) -> None:
    body = json.dumps(GOOD).encode()
    if compress:
        body = gzip.compress(body) if encoding == "gzip" else zlib.compress(body)
    headers = {**stack.headers(), "Content-Encoding": encoding}
    resp = requests.post(f"{stack.base_url}/chat/completions", data=body, headers=headers,
                         timeout=10)  # fmt: skip
    err = assert_envelope(resp, 415, f"Content-Encoding {encoding.rpartition(' ')[2]!r}")
    assert err["code"] == "unsupported_content_encoding"
    assert resp.headers["Connection"] == "close"  # refused before its body was read


@pytest.mark.parametrize("encoding", ["identity", "Identity"])
def test_content_encoding_identity_is_accepted(stack: Stack, encoding: str) -> None:
    headers = {**stack.headers(), "Content-Encoding": encoding}
    resp = requests.post(f"{stack.base_url}/chat/completions", data=json.dumps(GOOD), headers=headers,
                         timeout=10)  # fmt: skip
    assert resp.status_code == 200, resp.text


def test_missing_content_type_is_accepted(stack: Stack) -> None:
    resp = post(stack, json.dumps(GOOD).encode(), None)
    assert resp.status_code == 200, resp.text


def test_unsupported_parameter_names_it(stack: Stack) -> None:
    err = assert_envelope(post(stack, json.dumps({**GOOD, "logit_bias": {"1": 2}}).encode()), 400)
    assert err["param"] == "logit_bias"


def test_oversized_body_is_413_before_buffering(stack_factory) -> None:  # type: ignore[no-untyped-def]
    with stack_factory({"RELAY_MAX_REQUEST_BYTES": "4096"}) as s:
        big = json.dumps({**GOOD, "messages": [{"role": "user", "content": "x" * 10_000}]})
        resp = post(s, big.encode())
        err = assert_envelope(resp, 413, "RELAY_MAX_REQUEST_BYTES")
        assert err["code"] == "request_too_large"
        # A declared length far beyond the limit is refused from the headers alone:
        # the relay answers without waiting for a body that never comes.
        with socket.create_connection(("127.0.0.1", s.relay.port), timeout=5) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                + f"Authorization: Bearer {s.token}\r\n".encode()
                + b"Content-Type: application/json\r\nContent-Length: 999999999\r\n\r\n"
            )
            head = sock.recv(65536)
        assert head.startswith(b"HTTP/1.1 413"), head[:100]


def test_chunked_oversized_upload_is_413(stack_factory) -> None:  # type: ignore[no-untyped-def]
    with stack_factory({"RELAY_MAX_REQUEST_BYTES": "4096"}) as s:

        def chunks() -> Iterator[bytes]:
            for _ in range(4):
                yield b"x" * 2048

        resp = requests.post(
            f"{s.base_url}/chat/completions", data=chunks(), headers=s.headers(), timeout=10
        )
        assert_envelope(resp, 413, "RELAY_MAX_REQUEST_BYTES")


@pytest.mark.parametrize(
    "pieces",
    [
        pytest.param([b"y" * 1024] * 9, id="1KiB-chunks"),
        pytest.param([b"y" * 100] * 60, id="100B-chunks"),
    ],
)
def test_chunked_upload_sent_at_once_is_413(stack_factory, pieces) -> None:  # type: ignore[no-untyped-def]
    """Tornado coalesces small chunks that arrive together; its own body limit must not
    answer a bare 400 before the handler's 413."""
    with stack_factory({"RELAY_MAX_REQUEST_BYTES": "4096"}) as s:
        head = (
            "POST /v1/chat/completions HTTP/1.1\r\nHost: relay\r\n"
            f"Authorization: Bearer {s.token}\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
        ).encode()
        body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
        with socket.create_connection(("127.0.0.1", s.relay.port), timeout=10) as sock:
            with contextlib.suppress(OSError):  # the relay may close before reading it all
                sock.sendall(head + body)
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 413"), answer[:100]
        assert b"RELAY_MAX_REQUEST_BYTES" in answer


@pytest.mark.parametrize(
    "auth", [None, "Bearer wrong-token-wrong-token", "Basic abc", "Bearer", "bearer  "]
)
def test_auth_is_required(stack: Stack, auth: str | None) -> None:
    headers = {"Content-Type": "application/json"}
    if auth is not None:
        headers["Authorization"] = auth
    resp = requests.post(
        f"{stack.base_url}/chat/completions", data=json.dumps(GOOD), headers=headers, timeout=10
    )
    err = assert_envelope(resp, 401, "relay token")
    assert err["type"] == "authentication_error"
    assert stack.token not in resp.text


@pytest.mark.parametrize("path", ["/chat/completions", "/responses"])
@pytest.mark.parametrize("chunked", [False, True])
def test_a_refused_token_with_a_body_logs_no_error(
    stack: Stack, caplog: pytest.LogCaptureFixture, path: str, chunked: bool
) -> None:
    """prepare() refuses before the body is read; closing the connection then must not
    find the handler half set up (it logged an AttributeError from on_connection_close)."""
    body = json.dumps(GOOD).encode()
    data = iter([body]) if chunked else body  # a generator is sent chunked
    headers = {"Authorization": "Bearer wrong-token-wrong-token"}
    with caplog.at_level(logging.INFO):
        resp = requests.post(f"{stack.base_url}{path}", data=data, headers=headers, timeout=10)
        assert requests.get(f"{stack.base_url[:-3]}/healthz", timeout=5).status_code == 200
    err = assert_envelope(resp, 401, "RELAY_TOKEN")
    assert "printed path" not in err["message"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_the_401_says_where_a_generated_token_is(stack_factory) -> None:  # type: ignore[no-untyped-def]
    with stack_factory({"RELAY_TOKEN": ""}) as s:
        resp = requests.post(f"{s.base_url}/chat/completions", data=b"{}", timeout=10)
        message = assert_envelope(resp, 401, "relay-token", "RELAY_DATA_DIR")["message"]
        assert str(s.config.data_dir) not in message  # no server paths to anonymous callers


@pytest.mark.parametrize(
    ("declared", "status"), [("\u00b2", 400), ("+5", 400), ("1_0", 400), ("9" * 5000, 413)]
)
def test_a_strange_content_length_is_a_4xx(stack: Stack, declared: str, status: int) -> None:
    """The 413 pre-check took '²' for digits and failed in int() (a 500), as it did for
    4301 digits; Tornado then refuses anything but plain digits."""
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: relay\r\n"
        f"Authorization: Bearer {stack.token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {declared}\r\n\r\n"
    )
    port = stack.relay.port
    assert port is not None
    answers = read_answers(exchange(port, head.encode("latin-1") + b"{}"))
    assert [a.status for a in answers] == [status]
    error = json.loads(answers[0].body)["error"]
    assert error["code"] == ("malformed_http_request" if status == 400 else "request_too_large")


def test_models_and_health(stack_factory) -> None:  # type: ignore[no-untyped-def]
    aliases = json.dumps({"gpt-high": {"model": "gpt-5", "reasoning_effort": "high"}})
    with stack_factory({"RELAY_MODEL_ALIASES": aliases}) as s:
        assert requests.get(f"{s.base_url}/models", timeout=5).status_code == 401
        models = requests.get(f"{s.base_url}/models", headers=s.headers(), timeout=5).json()
        assert models["object"] == "list"
        assert models["data"][0] == {
            "id": "gpt-high",
            "object": "model",
            "created": 0,
            "owned_by": "relay",
        }  # then the upstream's own models (tests/integration/test_models.py)
        health = requests.get(f"http://127.0.0.1:{s.relay.port}/healthz", timeout=5)
        assert health.status_code == 200 and health.json() == {"status": "ok"}


def test_unknown_route_and_method(stack: Stack) -> None:
    resp = requests.get(f"{stack.base_url}/nothing", headers=stack.headers(), timeout=5)
    assert_envelope(resp, 404, "no route")
    resp = requests.get(f"{stack.base_url}/chat/completions", headers=stack.headers(), timeout=5)
    assert_envelope(resp, 405, "GET")
