"""The store's read-only aggregates (relay.storage.aggregates) on real SQLite files."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from relay.core.records import EMPTY_PLAN
from relay.core.scope import ScopeTargeting
from relay.storage.aggregates import PAYLOAD_BYTES_SCAN_ROWS, read_aggregates
from relay.storage.replay_store import ReasoningStore

TARGET = ScopeTargeting(credential="c" * 64, model="gpt-5", caller=None)


def h(n: int) -> str:
    return f"{n:064x}"


def fill(store: ReasoningStore, n: int, *, first_touch: float = 1000.0) -> list[int]:
    """``n`` observations with payloads of ``10 + i`` bytes, touched at first_touch + i."""
    ids = []
    with store.transaction():
        sid = store.scope_for(h(999), TARGET).id
        for i in range(n):
            obs = store.add_observation(
                scope_id=sid, generation=1, position=1, start_digest=h(0), end_digest=h(i + 1),
                envelope_fingerprint=h(5), payload_fingerprint=h(i + 1), output_hash=h(7),
                prior_plan=EMPTY_PLAN, intent_id=None, snapshot=None, replayable=True,
                now=first_touch + i,
            )  # fmt: skip
            store.put_payload(obs.id, "x" * (10 + i), first_touch + i)
            ids.append(obs.id)
    return ids


def checksum(store: ReasoningStore) -> str:
    """Every row of every table, and the files' bytes."""
    conn = store._conn
    assert conn is not None
    digest = hashlib.sha256()
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    for table in sorted(tables):
        for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1"):
            digest.update(repr(row).encode())
    for suffix in ("", "-wal"):
        path = store.path.with_name(store.path.name + suffix)
        if path.exists():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def test_exact_counts_sizes_and_ages(store: ReasoningStore) -> None:
    fill(store, 5)
    agg = store.aggregates(scan_rows=100)
    assert agg.counts["payloads"].value == 5 and agg.counts["payloads"].exact
    assert agg.counts["observations"].value == 5 and agg.counts["scopes"].value == 1
    assert agg.counts["intents"].value == 0 and agg.counts["strict_entries"].value == 0
    assert agg.payload_bytes.value == sum(10 + i for i in range(5)) and agg.payload_bytes.exact
    assert agg.oldest_payload_touched_at == 1000.0
    assert agg.newest_observation_at == 1004.0
    conn = store._conn
    assert conn is not None
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    assert agg.file_bytes == pages * conn.execute("PRAGMA page_size").fetchone()[0]
    assert agg.wal_bytes == store.path.with_name(store.path.name + "-wal").stat().st_size > 0


@pytest.mark.parametrize(("rows", "bound", "value", "exact"), [
    (3, 3, 3, True),  # exactly the bound: still exact
    (4, 3, 3, False),  # one more: a lower bound, never extrapolated
    (10, 1, 1, False),
    (0, 5, 0, True),
])  # fmt: skip
def test_counts_past_the_bound_are_lower_bounds(
    store: ReasoningStore, rows: int, bound: int, value: int, exact: bool
) -> None:
    fill(store, rows)
    agg = store.aggregates(scan_rows=bound)
    assert (agg.counts["payloads"].value, agg.counts["payloads"].exact) == (value, exact)
    assert agg.payload_bytes.exact is exact
    assert agg.payload_bytes.value == sum(10 + i for i in range(min(rows, bound)))


def test_payload_bytes_have_a_tighter_bound_of_their_own(store: ReasoningStore) -> None:
    fill(store, PAYLOAD_BYTES_SCAN_ROWS + 1)
    agg = store.aggregates(scan_rows=10 * PAYLOAD_BYTES_SCAN_ROWS)
    assert agg.counts["payloads"].exact and agg.counts["payloads"].value == (
        PAYLOAD_BYTES_SCAN_ROWS + 1
    )
    assert not agg.payload_bytes.exact
    assert agg.payload_bytes.value == sum(10 + i for i in range(PAYLOAD_BYTES_SCAN_ROWS))


def test_reading_aggregates_changes_no_row_and_no_byte(store: ReasoningStore) -> None:
    fill(store, 20)
    before = checksum(store)
    for bound in (1, 5, 1000):
        store.aggregates(scan_rows=bound)
    assert checksum(store) == before


def test_nothing_can_write_while_they_are_read(store: ReasoningStore) -> None:
    """query_only is on during the read and off again after it."""
    conn = store._conn
    assert conn is not None
    seen: list[int] = []
    conn.set_trace_callback(
        lambda sql: seen.append(conn.execute("PRAGMA query_only").fetchone()[0])
        if sql.startswith("SELECT") else None
    )  # fmt: skip
    try:
        read_aggregates(conn, store.path, scan_rows=10)
    finally:
        conn.set_trace_callback(None)
    assert seen and all(seen)
    assert conn.execute("PRAGMA query_only").fetchone()[0] == 0
    with store.transaction():
        store.set_meta("after", 1)  # writing works again


def test_a_missing_wal_counts_zero(tmp_path: Path) -> None:
    path = tmp_path / "plain.sqlite"
    conn = sqlite3.connect(path)
    for table in ("scopes", "observations", "markers", "intents", "strict_entries"):
        conn.execute(f"CREATE TABLE {table} (id INTEGER)")
    conn.execute("CREATE TABLE payloads (id INTEGER, size INTEGER, touched_at REAL)")
    conn.commit()
    agg = read_aggregates(conn, path, scan_rows=10)
    assert agg.wal_bytes == 0 and agg.oldest_payload_touched_at is None
    assert agg.newest_observation_at is None
    conn.close()
