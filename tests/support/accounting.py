"""Waiting for the relay's token accounting (relay.ops.token_stats) in loopback tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import requests

from relay.core.token_usage import Usage
from relay.ops.token_stats import token_accounting
from tests.support.agent_session import MODEL
from tests.support.stack import Stack


@contextmanager
def counting(stack: Stack, expected: int) -> Iterator[None]:
    """Run the body, then wait until the relay has accounted for ``expected`` requests
    in all (each is counted as its handler finishes, just after the client has its last
    byte, so a client's answer alone does not mean it is counted)."""
    runtime = stack.relay.runtime
    assert runtime is not None
    tokens = token_accounting(runtime)
    assert tokens is not None
    answered = tokens.answered
    done = threading.Event()

    def counted(shape: str, model: Any, header: str | None, usage: Usage | None) -> None:
        answered(shape, model, header, usage)  # on the relay's loop
        if sum(t.requests for t in tokens.since_start.by_key.values()) >= expected:
            done.set()

    tokens.answered = counted  # type: ignore[method-assign]
    try:
        yield
        assert done.wait(10), "the relay did not account for every request"
    finally:
        tokens.answered = answered  # type: ignore[method-assign]


def direct_responses_call(stack: Stack) -> None:
    """One non-streaming ``POST /v1/responses`` (direct traffic: the relay fences it)."""
    stack.script({"output": [{"type": "message", "text": "direct answer"}]})
    answer = requests.post(
        f"http://127.0.0.1:{stack.port}/v1/responses",
        headers=stack.headers(),
        json={"model": MODEL, "input": "hello", "stream": False},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
