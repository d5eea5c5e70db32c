"""``RELAY_DROP_UNSUPPORTED_PARAMS=1`` over real loopback servers: what the Responses API
cannot take is dropped (not sent upstream), the answer says which in
``X-Relay-Dropped-Params`` and the log names each parameter once per process; without it
the same request is a clear 400, and parameters that change what the model is given stay
refused either way."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.stack import Stack, running_stack

GENERIC = {"stop": ["END"], "seed": 7, "n": 2, "presence_penalty": 0.5}


def post(stack: Stack, **extra: Any) -> requests.Response:
    body = {"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}], **extra}
    return requests.post(
        f"{stack.base_url}/chat/completions", json=body, headers=stack.headers(), timeout=30
    )


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_dropped_sent_nowhere_said_in_a_header_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, stream: bool
) -> None:
    env = {"RELAY_DROP_UNSUPPORTED_PARAMS": "1"}
    with caplog.at_level(logging.INFO, logger="relay"), running_stack(tmp_path, env) as stack:
        for _ in range(2):
            answer = post(stack, stream=stream, **GENERIC)
            assert answer.status_code == 200, answer.text
            assert answer.headers["X-Relay-Dropped-Params"] == "n,presence_penalty,seed,stop"
            sent = stack.fake.requests[-1].body
            assert not set(GENERIC) & set(sent)
        plain = post(stack, stream=stream)
        assert plain.status_code == 200 and "X-Relay-Dropped-Params" not in plain.headers
        refused = post(stack, stream=stream, functions=[{"name": "f"}])
        assert refused.status_code == 400
        assert refused.json()["error"]["param"] == "functions"
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("param_dropped")]
    assert sorted(lines) == [
        f"param_dropped param={name} setting=RELAY_DROP_UNSUPPORTED_PARAMS"
        for name in ("n", "presence_penalty", "seed", "stop")
    ]


def test_without_the_opt_in_it_is_a_clear_400(tmp_path: Path) -> None:
    with running_stack(tmp_path) as stack:
        answer = post(stack, seed=7)
        assert answer.status_code == 400
        error = answer.json()["error"]
        assert (error["code"], error["param"]) == ("unsupported_parameter", "seed")
        assert error["message"] == (
            "'seed' is not supported: the Responses API has no seed; remove 'seed' (or start "
            "the relay with RELAY_DROP_UNSUPPORTED_PARAMS=1 to drop it)"
        )
        assert stack.fake.requests == []
