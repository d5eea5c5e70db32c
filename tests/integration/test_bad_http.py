"""Requests that are wrong at the HTTP/1 level, over a raw socket: each gets one answer
with the OpenAI error envelope and a message that says what to fix (Tornado alone answers
a bare "400 Bad Request", or closes without a word), and the relay keeps serving."""

from __future__ import annotations

import http.client
import json
import logging
from typing import Any

import pytest
import requests

from tests.support.raw_http import Answer, converse, exchange, read_answers
from tests.support.stack import Stack, StackFactory

GOOD_BODY = json.dumps({"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]})


def request(
    stack: Stack,
    *,
    line: str = "POST /v1/chat/completions HTTP/1.1",
    headers: list[str] | None = None,
    framing: list[str] | None = None,
    body: bytes = b"",
    auth: bool = True,
    host: bool = True,
) -> bytes:
    lines = [line, *(["Host: relay"] if host else []), "Content-Type: application/json"]
    if auth:
        lines.append(f"Authorization: Bearer {stack.token}")
    lines += headers or []
    lines += framing if framing is not None else [f"Content-Length: {len(body)}"]
    return "\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + body


def relay_port(stack: Stack) -> int:
    port = stack.relay.port
    assert port is not None  # the stack is running
    return port


def only_answer(stack: Stack, data: bytes) -> Answer:
    answers = read_answers(exchange(relay_port(stack), data))
    assert len(answers) == 1, answers
    return answers[0]


def refused(answer: Answer, status: int, *needles: str) -> dict[str, object]:
    assert answer.status == status, answer
    assert answer.header("content-type") == "application/json"
    error: dict[str, Any] = json.loads(answer.body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    for needle in needles:
        assert needle in error["message"], error["message"]
    return error


def still_serving(stack: Stack) -> None:
    assert requests.get(f"http://127.0.0.1:{stack.relay.port}/healthz", timeout=5).ok


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


CASES = {
    "request line": (dict(line="GARBAGE"), "request line"),
    "two spaces in the request line": (dict(line="GET  / HTTP/1.1"), "request line"),
    "HTTP/2 preface": (dict(line="PRI * HTTP/2.0"), "HTTP version"),
    "NUL in a header value": (dict(headers=["X-Note: a\x00b"]), "control character"),
    "space in a header name": (dict(headers=["X Note: a"]), "header name"),
    "header without a colon": (dict(headers=["X-Note"]), "'Name: value'"),
    "folded header": (dict(headers=["X-Note: a", " folded"]), "line folding"),
    "negative Content-Length": (dict(framing=["Content-Length: -1"]), "decimal digits"),
    "word as Content-Length": (dict(framing=["Content-Length: abc"]), "decimal digits"),
    "unequal Content-Lengths": (
        dict(framing=["Content-Length: 2", "Content-Length: 3"], body=b"{}"),
        "exactly one Content-Length",
    ),
    "Content-Length and chunked": (
        dict(framing=["Content-Length: 2", "Transfer-Encoding: chunked"], body=chunked(b"{}")),
        "not both",
    ),
    "gzip transfer coding": (dict(framing=["Transfer-Encoding: gzip"]), "only"),
    "chunk size not hex": (
        dict(framing=["Transfer-Encoding: chunked"], body=b"zz\r\n{}\r\n0\r\n\r\n"),
        "hexadecimal",
    ),
    "chunk extension": (
        dict(framing=["Transfer-Encoding: chunked"], body=b"2;x=y\r\n{}\r\n0\r\n\r\n"),
        "chunk extensions",
    ),
    "chunk longer than its size": (
        dict(framing=["Transfer-Encoding: chunked"], body=b"1\r\n{}\r\n0\r\n\r\n"),
        "exactly its stated size",
    ),
    "trailer after the last chunk": (
        dict(framing=["Transfer-Encoding: chunked"], body=b"2\r\n{}\r\n0\r\nX: y\r\n\r\n"),
        "trailers",
    ),
    "size line over 64 bytes": (
        dict(framing=["Transfer-Encoding: chunked"], body=b"0" * 70 + b"2\r\n{}\r\n0\r\n\r\n"),
        "longer than 64 bytes",
    ),
    "bare LF chunked framing": (
        dict(framing=["Transfer-Encoding: chunked"], body=b"3\nabc\n0\n\n"),
        "bare LF",
    ),
    "bare CR chunked framing": (
        dict(framing=["Transfer-Encoding: chunked"], body=b"3\rabc\r0\r\r"),
        "hexadecimal digits and CRLF",
    ),
    "bare LF after the last chunk": (
        dict(framing=["Transfer-Encoding: chunked"], body=chunked(b"{}")[:-2] + b"\n"),
        "bare LF",
    ),
    "no Host": (dict(line="GET /healthz HTTP/1.1", framing=[], host=False), "Host header"),
    "two Hosts": (dict(line="GET /healthz HTTP/1.1", headers=["Host: other"]), "one Host"),
    "HTTP/1.0 with both framings": (
        dict(
            line="POST /v1/chat/completions HTTP/1.0",
            framing=["Content-Length: 2", "Transfer-Encoding: chunked"],
        ),
        "not both",
    ),
}


@pytest.mark.parametrize("auth", [True, False], ids=["authorized", "anonymous"])
@pytest.mark.parametrize(("parts", "needle"), list(CASES.values()), ids=list(CASES))
def test_malformed_requests_get_the_envelope(
    stack: Stack,
    caplog: pytest.LogCaptureFixture,
    parts: dict[str, object],
    needle: str,
    auth: bool,
) -> None:
    data = request(stack, **parts, auth=auth)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO):
        answer = only_answer(stack, data)
    if answer.status == 401:  # prepare() refused first; the framing error came after
        assert not auth
    else:
        error = refused(answer, 400, needle)
        assert error["code"] == "malformed_http_request"
        assert answer.header("connection") == "close"
        assert answer.header("x-request-id") is not None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    assert stack.token not in caplog.text
    still_serving(stack)


def test_a_header_value_is_never_quoted_back(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    # Tornado's own error text quotes the bad value, here a credential.
    data = request(stack, headers=[f"X-Api-Key: {stack.token}\x00"])
    with caplog.at_level(logging.DEBUG):
        answer = only_answer(stack, data)
    refused(answer, 400, "control character")
    assert stack.token.encode() not in answer.body
    assert stack.token not in caplog.text


@pytest.mark.parametrize("size", [70_000, 65_537, 2_000_000], ids=["70KB", "just over", "2MB"])
def test_a_head_over_the_limit_is_431(stack: Stack, size: int) -> None:
    data = request(stack, line="GET /healthz HTTP/1.1", headers=["X-Big: " + "a" * size])
    error = refused(only_answer(stack, data), 431, "exceed 65536 bytes")
    assert error["code"] == "request_header_fields_too_large"
    still_serving(stack)


def test_a_head_over_the_limit_is_431_through_an_http_client(stack: Stack) -> None:
    resp = requests.post(
        f"{stack.base_url}/chat/completions",
        data=GOOD_BODY,
        headers={**stack.headers(), "X-Big": "a" * 100_000},
        timeout=10,
    )
    assert resp.status_code == 431
    assert resp.json()["error"]["code"] == "request_header_fields_too_large"


def test_a_head_just_within_the_limit_is_served(stack: Stack) -> None:
    head = request(stack, line="GET /healthz HTTP/1.1", framing=[])
    pad = 65536 - len(head) - len("X-Pad: \r\n")
    data = head[:-2] + b"X-Pad: " + b"a" * pad + b"\r\n\r\n"
    assert len(data) == 65536
    # Kept alive: read until the answer is complete, not until `exchange`'s 10 s idle wait.
    [answer] = read_answers(converse(relay_port(stack), data, answer_due=True))
    assert answer.status == 200


def test_a_refusal_after_the_application_answered_is_not_a_second_answer(
    stack: Stack,
) -> None:
    # Anonymous: prepare() answers 401 from the head; the bad chunk comes after.
    data = request(stack, auth=False, framing=["Transfer-Encoding: chunked"], body=b"zz\r\n")
    assert only_answer(stack, data).status == 401


def test_keep_alive_then_a_bad_request_on_the_same_connection(stack: Stack) -> None:
    good = request(stack, line="GET /healthz HTTP/1.1", framing=[])
    bad = request(stack, framing=["Content-Length: x"])
    answers = read_answers(exchange(relay_port(stack), good + good + bad))
    assert [a.status for a in answers] == [200, 200, 400]
    refused(answers[2], 400, "decimal digits")


def test_pipelined_requests_are_all_answered(stack: Stack) -> None:
    body = GOOD_BODY.encode()
    one = request(stack, body=body)
    last = request(stack, body=body, headers=["Connection: close"])
    answers = read_answers(exchange(relay_port(stack), one + one + last))
    assert [a.status for a in answers] == [200, 200, 200]
    assert all(json.loads(a.body)["object"] == "chat.completion" for a in answers)


def test_a_chunked_upload_in_many_pieces_is_read(stack: Stack) -> None:
    body = GOOD_BODY.encode()
    pieces = [body[i : i + 3] for i in range(0, len(body), 3)]
    data = request(
        stack,
        framing=["Transfer-Encoding: chunked"],
        body=chunked(*pieces),
        headers=["Connection: close"],
    )
    answer = only_answer(stack, data)
    assert answer.status == 200, answer
    assert json.loads(answer.body)["object"] == "chat.completion"


@pytest.mark.parametrize(
    ("token", "size", "status"),
    [("wrong-token-0123456789", 2, 401), (None, 2000, 413)],
    ids=["401 from prepare", "413 by Content-Length"],
)
def test_a_refusal_before_the_body_says_the_connection_closes(
    stack_factory: StackFactory,
    token: str | None,
    size: int,
    status: int,
) -> None:
    """The streamed-body handlers refuse from the head, leaving the body unread; the
    connection cannot be reused, and the answer says so (keep-alive: http.client)."""
    with stack_factory({"RELAY_MAX_REQUEST_BYTES": "1024"}) as s:
        conn = http.client.HTTPConnection("127.0.0.1", s.relay.port, timeout=10)
        try:
            headers = {**s.headers(), "Authorization": f"Bearer {token or s.token}"}
            conn.request("POST", "/v1/chat/completions", body=b"{" + b" " * (size - 2) + b"}",
                         headers=headers)  # fmt: skip
            first = conn.getresponse()
            first.read()
            assert first.status == status
            assert first.getheader("Connection") == "close"
            assert first.will_close
            conn.request("GET", "/healthz")  # http.client opens a new connection for it
            second = conn.getresponse()
            assert (second.status, second.read()) == (200, b'{"status":"ok"}')
            assert second.getheader("Connection") is None  # a plain request keeps it open
        finally:
            conn.close()
