"""An upstream HTTP error body becomes the client's envelope, whatever its bytes."""

from __future__ import annotations

import json

import pytest

from relay.transport.upstream import _http_error

OWN = {"error": {"message": "bad model", "type": "invalid_request_error", "param": "model",
                 "code": "model_not_found"}}  # fmt: skip


def test_an_openai_envelope_is_kept_as_sent() -> None:
    err = _http_error(404, json.dumps(OWN).encode())
    assert (err.status, err.code, err.envelope()) == (404, "model_not_found", OWN)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"<html>bad gateway</html>",
        b"\xff\xfe not utf-8",
        b"[1, 2]",
        b'{"error": "a string"}',
        b'{"error":' * 100_000 + b"1" + b"}" * 100_000,  # past the recursion limit
    ],
)
def test_any_other_body_gets_the_relays_own_envelope(body: bytes) -> None:
    err = _http_error(502, body)
    error = err.envelope()["error"]
    assert err.status == 502
    assert err.code == "http_502"
    assert error["message"] == "upstream answered HTTP 502 without an OpenAI error body"
