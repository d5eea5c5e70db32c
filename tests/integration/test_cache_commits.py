"""What a cached request commits before its upstream request leaves (design §21 Speed):
exactly one transaction, the dispatch intent (plan revalidation, pins, touches, the
intent row), on a first turn (a new scope) and on a later turn that replays. Each commit
is an fsync at ``synchronous=FULL``, the largest part of the cache's share of the time to
first token: a second one here is a regression.

The store's statements are traced on the relay's loop thread, which also serves the fake
upstream, so the fake's request count read at each ``COMMIT`` says on which side of the
forward it happened (a commit after the send and before the fake's handler ran counts as
before: the count can only err towards failing)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

from tests.support.cache_stack import ask, continuity
from tests.support.sqlite_store import sqlite_store
from tests.support.stack import Stack


@dataclass
class Transactions:
    """The store's transactions, each as (upstream requests received at its commit,
    its statements)."""

    done: list[tuple[int, list[str]]] = field(default_factory=list)
    open: list[str] | None = None

    def before(self, received: int) -> list[list[str]]:
        """The statements of each transaction committed before request ``received + 1``
        reached the upstream."""
        return [statements for seen, statements in self.done if seen == received]


@contextmanager
def traced(stack: Stack) -> Iterator[Transactions]:
    assert stack.relay.runtime is not None
    connection = sqlite_store(stack.relay.runtime.cache.store)._conn
    assert connection is not None
    found = Transactions()

    def statement(sql: str) -> None:
        verb = sql.lstrip().split(None, 1)[0].upper()
        if verb == "BEGIN":
            found.open = []
        elif verb == "COMMIT":
            assert found.open is not None, "a COMMIT without a BEGIN"
            found.done.append((stack.fake.received, found.open))
            found.open = None
        elif found.open is not None:
            found.open.append(sql)

    async def trace(on: bool) -> None:
        connection.set_trace_callback(statement if on else None)

    stack.loop.run(trace(True))
    try:
        yield found
    finally:
        stack.loop.run(trace(False))


WRITE = re.compile(r"^\s*(?:INSERT(?: OR \w+)? INTO|UPDATE|DELETE FROM)\s+(\w+)", re.IGNORECASE)


def writes(statements: list[str]) -> set[str]:
    """The tables a transaction wrote."""
    return {match.group(1) for sql in statements if (match := WRITE.match(sql))}


@pytest.mark.parametrize("stream", [True, False])
def test_one_commit_before_forwarding_first_and_later_turns(cached: Stack, stream: bool) -> None:
    first = [{"role": "user", "content": "hi"}]
    with traced(cached) as turn_one:
        text = ask(cached, first, stream=stream)
    history = [*first, {"role": "assistant", "content": text}, {"role": "user", "content": "more"}]
    with traced(cached) as turn_two:
        assert continuity(ask(cached, history, stream=stream)) == (1, 1, 0)
    for turn, received in ((turn_one, 0), (turn_two, 1)):
        before = turn.before(received)
        assert len(before) == 1, before  # the dispatch intent, and nothing else
        assert "intents" in writes(before[0])
        # The scope row of a first turn rides in the same transaction.
        assert received or "scopes" in writes(before[0])
        # The generation's own record comes after the upstream answered.
        assert any("observations" in writes(s) for s in turn.before(received + 1))
