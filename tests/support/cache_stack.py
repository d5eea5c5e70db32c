"""The replay cache over a loopback stack (tests/support/stack.py): the settings that turn
it on, a turn asked through the official SDK, the fake upstream's continuity verdict on
where replayed reasoning landed, and a store whose writes fail."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.support.sqlite_store import sqlite_store
from tests.support.stack import Stack

CACHE_ON = {"REASONING_CACHE_ENABLED": "1"}
CONTINUITY = re.compile(r"continuity: replayed=(\d+) intact=(\d+) misplaced=(\d+)")


def continuity(text: str) -> tuple[int, int, int]:
    match = CONTINUITY.search(text)
    assert match, text
    replayed, intact, misplaced = (int(g) for g in match.groups())
    return replayed, intact, misplaced


def ask(stack: Stack, messages: list[dict[str, Any]], *, stream: bool, **extra: Any) -> str:
    with stack.openai() as client:
        if stream:
            with client.chat.completions.create(
                model="gpt-5", messages=messages, stream=True, **extra
            ) as chunks:
                return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        answer = client.chat.completions.create(model="gpt-5", messages=messages, **extra)
        return answer.choices[0].message.content or ""


@contextmanager
def writes_fail(stack: Stack) -> Iterator[None]:
    """Every write on the relay's own store connection fails (SQLITE_READONLY through
    ``PRAGMA query_only``), on the relay's loop thread, which owns the connection. The
    store tests cover SQLITE_FULL; here any write failure must refuse the request."""
    assert stack.relay.runtime is not None
    connection = sqlite_store(stack.relay.runtime.cache.store)._conn
    assert connection is not None

    async def query_only(on: bool) -> None:
        connection.execute(f"PRAGMA query_only = {int(on)}")

    stack.loop.run(query_only(True))
    try:
        yield
    finally:
        stack.loop.run(query_only(False))
