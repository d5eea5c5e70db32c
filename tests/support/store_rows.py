"""Rows written straight through the replay store's API, for the store's own unit tests
(tests/unit/storage): digests, a scope, an intent, an observation, the owner's
connection. Tests of the cache path build their rows through the relay instead
(:mod:`tests.support.store_builder`)."""

from __future__ import annotations

import sqlite3

from relay.core.records import EMPTY_PLAN, Observation, PriorPlan
from relay.core.scope import ScopeTargeting
from relay.storage.replay_store import ReasoningStore

TARGET = ScopeTargeting(credential="c" * 64, model="gpt-5", caller=None)
MARKER = "PAYLOAD-MARKER-7f3a"  # must never appear in an error message


def h(n: int | str) -> str:
    """A distinct 64-hex digest per ``n``."""
    return f"{n:064x}" if isinstance(n, int) else n * 64


def conn_of(store: ReasoningStore) -> sqlite3.Connection:
    """The store's own connection, for tampering and PRAGMA checks only."""
    conn = store._conn
    assert conn is not None
    return conn


def scope_id(store: ReasoningStore, digest: str = h("a")) -> int:
    return store.scope_for(digest, TARGET).id


def simple_intent(store: ReasoningStore, sid: int, intent_id: str = "i") -> None:
    """An intent at position 1 with an empty plan (inside a transaction)."""
    store.create_intent(intent_id, scope_id=sid, position=1, start_digest=h(0), now=1.0)


def observe(
    store: ReasoningStore,
    scope: int,
    *,
    end: str,
    start: str = h(0),
    payload: str = h("d"),
    generation: int = 1,
    position: int = 1,
    plan: PriorPlan = EMPTY_PLAN,
    intent_id: str | None = None,
    snapshot: str | None = None,
    replayable: bool = True,
    now: float = 100.0,
) -> Observation:
    with store.transaction():
        return store.add_observation(
            scope_id=scope, generation=generation, position=position, start_digest=start,
            end_digest=end, envelope_fingerprint=h("e"), payload_fingerprint=payload,
            output_hash=h("f"), prior_plan=plan, intent_id=intent_id, snapshot=snapshot,
            replayable=replayable, now=now,
        )  # fmt: skip
