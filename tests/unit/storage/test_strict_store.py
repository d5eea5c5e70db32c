"""The strict-provider tables (relay.storage.strict_store) against real SQLite files."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.clock import ManualClock
from relay.core.scope import ScopeTargeting
from relay.errors import StoreError
from relay.storage.replay_store import ReasoningStore
from relay.storage.schema import SCHEMA_VERSION, migrate_to
from relay.storage.strict_store import MAX_PAGE, StrictEntries, StrictTally, text_digest

S, OTHER = "a" * 64, "b" * 64


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "reasoning-cache.sqlite"


@pytest.fixture
def store(db_path: Path) -> Iterator[ReasoningStore]:
    with ReasoningStore.open(db_path, clock=ManualClock()) as opened:
        yield opened


def put(strict: StrictEntries, n: int, **kw: Any) -> Any:
    values: dict[str, Any] = {
        "scope_digest": S, "end_digest": f"{n:064x}", "tool_call_ids": (), "provider": "deepseek",
        "model": "deepseek-chat", "reasoning": f"thought {n}", "now": 100.0 + n,
        "expires_at": 1000.0 + n,
    }  # fmt: skip
    return strict.put(**{**values, **kw})


def test_put_and_find_by_end_and_by_tool_call(store: ReasoningStore) -> None:
    strict = store.strict
    entry = put(strict, 1, tool_call_ids=("call_a", "call_b", "call_a"))
    assert entry.tool_call_ids == ("call_a", "call_b")
    assert entry.text_digest == text_digest("thought 1")
    assert entry.chars == len("thought 1")
    assert strict.by_end(S, f"{1:064x}") == entry
    assert strict.by_tool_call(S, "call_b") == entry
    assert strict.get(entry.id) == entry
    assert strict.by_tool_call(OTHER, "call_b") is None  # ids are scoped
    assert strict.by_end(OTHER, f"{1:064x}") is None
    assert entry.intact and not entry.expired(1000.9) and entry.expired(1001.0)


def test_same_end_digest_replaces_the_record(store: ReasoningStore) -> None:
    strict = store.strict
    first = put(strict, 1, tool_call_ids=("call_a",), reasoning="first")
    second = put(strict, 1, reasoning="second")
    assert strict.by_end(S, f"{1:064x}") == second
    assert strict.get(first.id) is None
    assert strict.by_tool_call(S, "call_a") is None  # its index went with it (cascade)
    assert strict.stats(0).entries == 1


def test_tool_call_ids_move_to_the_newest_and_orphans_go(store: ReasoningStore) -> None:
    strict = store.strict
    old = put(strict, 1, end_digest=None, tool_call_ids=("call_a",))
    keyed = put(strict, 2, tool_call_ids=("call_b",))
    new = put(strict, 3, end_digest=None, tool_call_ids=("call_a", "call_b"))
    assert strict.by_tool_call(S, "call_a") == new
    assert strict.by_tool_call(S, "call_b") == new
    assert strict.get(old.id) is None  # no key left: removed
    kept = strict.get(keyed.id)  # still found by its end digest
    assert kept is not None and kept.tool_call_ids == ()


def test_touch_slides_forward_only(store: ReasoningStore) -> None:
    strict = store.strict
    entry = put(strict, 1)
    strict.touch([entry.id, entry.id], now=500.0, expires_at=5000.0)
    touched = strict.get(entry.id)
    assert touched is not None
    assert (touched.touched_at, touched.expires_at) == (500.0, 5000.0)
    strict.touch([entry.id], now=50.0, expires_at=60.0)  # a clock stepped back
    assert strict.get(entry.id) == touched
    strict.touch([], now=1.0, expires_at=1.0)  # nothing to do


def test_delete_expired(store: ReasoningStore) -> None:
    strict = store.strict
    for n in range(4):
        put(strict, n, tool_call_ids=(f"call_{n}",))
    assert strict.delete_expired(1001.5) == 2  # expiries 1000 and 1001
    assert strict.stats(0).entries == 2
    assert strict.by_tool_call(S, "call_0") is None
    assert strict.by_tool_call(S, "call_3") is not None


def test_pages_newest_first_with_filters(store: ReasoningStore) -> None:
    strict = store.strict
    for n in range(5):
        put(strict, n, provider="deepseek" if n % 2 else "kimi", model=f"m{n % 2}")
    first = strict.page(limit=2)
    assert [e.reasoning for e in first.entries] == ["thought 4", "thought 3"]
    second = strict.page(limit=2, before_id=first.next_before_id)
    third = strict.page(limit=2, before_id=second.next_before_id)
    assert [e.reasoning for e in second.entries + third.entries] == [
        "thought 2", "thought 1", "thought 0",
    ]  # fmt: skip
    assert third.next_before_id is None
    only = strict.page(provider="deepseek")
    assert [e.reasoning for e in only.entries] == ["thought 3", "thought 1"]
    assert strict.page(provider="kimi", model="m1").entries == ()
    assert len(strict.page(model="m0").entries) == 3
    for bad in (0, MAX_PAGE + 1):
        with pytest.raises(ValueError, match="limit"):
            strict.page(limit=bad)


@pytest.mark.parametrize(
    ("before_id", "count"), [(2**63 - 1, 3), (2**63, 3), (10**30, 3), (-(2**63) - 1, 0), (1, 0)]
)
def test_a_page_before_any_integer_is_answered(
    store: ReasoningStore, before_id: int, count: int
) -> None:
    # SQLite binds 64-bit integers only; beyond that every (or no) id is "before" it.
    for n in range(3):
        put(store.strict, n)
    assert len(store.strict.page(before_id=before_id).entries) == count


def test_stats(store: ReasoningStore) -> None:
    strict = store.strict
    empty = strict.stats(0)
    assert (empty.entries, empty.chars, empty.expired) == (0, 0, 0)
    assert empty.oldest_created_at is None and empty.by_provider == {}
    put(strict, 1, reasoning="abc")
    put(strict, 2, reasoning="de", provider="kimi", model="kimi-k2")
    put(strict, 3, reasoning="f")
    stats = strict.stats(1001.5)
    assert (stats.entries, stats.chars, stats.expired) == (3, 6, 1)
    assert stats.by_provider == {"deepseek": StrictTally(2, 4), "kimi": StrictTally(1, 2)}
    assert stats.by_model == {"deepseek-chat": StrictTally(2, 4), "kimi-k2": StrictTally(1, 2)}
    assert (stats.oldest_created_at, stats.newest_created_at) == (101.0, 103.0)


def test_deletions(store: ReasoningStore) -> None:
    strict = store.strict
    put(strict, 1, tool_call_ids=("call_x",))
    put(strict, 2, scope_digest=OTHER, tool_call_ids=("call_x",))
    put(strict, 3, provider="kimi")
    put(strict, 4)
    assert strict.delete_tool_call("call_x") == 2  # in every scope
    assert strict.delete_provider("kimi") == 1
    assert strict.delete_provider("kimi") == 0
    (last,) = strict.page().entries
    assert strict.delete(last.id) and not strict.delete(last.id)
    put(strict, 5)
    assert strict.delete_all() == 1
    assert strict.stats(0).entries == 0


def test_a_tampered_text_is_not_intact(store: ReasoningStore) -> None:
    entry = put(store.strict, 1)
    conn = store._conn
    assert conn is not None
    conn.execute("UPDATE strict_entries SET reasoning = 'forged' WHERE id = ?", (entry.id,))
    found = store.strict.get(entry.id)
    assert found is not None and not found.intact


def test_text_that_is_not_unicode_is_refused(store: ReasoningStore) -> None:
    with pytest.raises(ValueError, match="lone surrogates"):
        put(store.strict, 1, reasoning="bad \ud800")
    assert store.strict.stats(0).entries == 0


def test_survives_reopen(db_path: Path) -> None:
    with ReasoningStore.open(db_path, clock=ManualClock()) as store:
        entry = put(store.strict, 1, tool_call_ids=("call_a",))
    with ReasoningStore.open(db_path, clock=ManualClock()) as store:
        assert store.strict.by_tool_call(S, "call_a") == entry


def test_mutations_cannot_nest_in_a_store_transaction(store: ReasoningStore) -> None:
    with pytest.raises(RuntimeError, match="do not nest"), store.transaction():
        put(store.strict, 1)


def test_a_closed_store_raises_store_errors(db_path: Path) -> None:
    store = ReasoningStore.open(db_path, clock=ManualClock())
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.strict.by_end(S, "e")


def test_a_version_1_file_is_migrated(db_path: Path) -> None:
    db_path.parent.mkdir(mode=0o700)
    conn = sqlite3.connect(db_path, isolation_level=None)
    migrate_to(conn, 1)
    conn.execute("INSERT INTO meta (key, value) VALUES ('secret', ?)", (b"s" * 32,))
    conn.execute(
        "INSERT INTO scopes (digest, credential, model, caller, created_at) "
        "VALUES (?, 'c', 'gpt-5', NULL, 1.0)",
        ("d" * 64,),
    )
    conn.close()
    with ReasoningStore.open(db_path, clock=ManualClock()) as store:
        assert store.secret == b"s" * 32  # the old secret, so old scopes keep matching
        assert store.find_scope("d" * 64) is not None
        migrated = store._conn
        assert migrated is not None
        assert migrated.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
        assert put(store.strict, 1).id == 1
        assert store.integrity_check() == ["ok"]
    with ReasoningStore.open(db_path, clock=ManualClock()) as again:  # idempotent
        assert again.strict.stats(0).entries == 1


def test_scope_targeting_is_untouched_by_strict_rows(store: ReasoningStore) -> None:
    put(store.strict, 1)
    assert store.stats()["scopes"] == 0
    target = ScopeTargeting(credential="c" * 64, model="gpt-5", caller=None)
    assert store.scopes_targeted(credential=target.credential, model="gpt-5", caller=None) == []
