"""The payloads gateway (relay.storage.payloads) against a real store."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.clock import ManualClock
from relay.core.records import (
    TOUCH_GRANULARITY_S,
    Observation,
    StoredSizeExceeded,
)
from relay.storage.replay_store import ReasoningStore
from tests.support.store_rows import conn_of, h, observe, scope_id

# --- payloads ------------------------------------------------------------------------


def test_payload_round_trip(store: ReasoningStore) -> None:
    sid = scope_id(store)
    obs = observe(store, sid, end=h(1))
    assert store.load_payload(obs.id, max_bytes=100) is None
    text = '[{"type":"reasoning","encrypted_content":"é"}]'
    with store.transaction():
        store.put_payload(obs.id, text, 50.0)
    loaded = store.load_payload(obs.id, max_bytes=100)
    assert loaded is not None
    stored = (loaded.observation_id, loaded.output_json, loaded.touched_at)
    assert stored == (obs.id, text.encode(), 50.0)  # the stored UTF-8 bytes, not decoded
    assert loaded.size == len(text.encode()) == len(text) + 1
    assert store.stats()["payload_bytes"] == loaded.size


@pytest.mark.parametrize(("max_bytes", "refused"), [(9, True), (10, False), (11, False)])
def test_load_payload_limit(store: ReasoningStore, max_bytes: int, refused: bool) -> None:
    sid = scope_id(store)
    obs = observe(store, sid, end=h(1))
    with store.transaction():
        store.put_payload(obs.id, "x" * 10, 1.0)
    if refused:
        with pytest.raises(StoredSizeExceeded, match=f"is 10 bytes, over the {max_bytes} byte"):
            store.load_payload(obs.id, max_bytes=max_bytes)
    else:
        assert store.load_payload(obs.id, max_bytes=max_bytes) is not None


def test_oversize_payload_is_refused_before_its_text_is_read(store: ReasoningStore) -> None:
    sid = scope_id(store)
    obs = observe(store, sid, end=h(1))
    with store.transaction():
        store.put_payload(obs.id, "x", 1.0)
    # One byte of text under a size column of 5000: refused on the column alone, since
    # loading the text would have measured 1 byte and let it through.
    conn_of(store).execute("UPDATE payloads SET size = 5000")
    with pytest.raises(StoredSizeExceeded, match="is 5000 bytes"):
        store.load_payload(obs.id, max_bytes=4999)
    loaded = store.load_payload(obs.id, max_bytes=5000)
    assert loaded is not None and (loaded.output_json, loaded.size) == (b"x", 1)


def test_payload_text_is_loaded_as_its_stored_bytes_even_when_damaged(
    store: ReasoningStore,
) -> None:
    """No decode: bytes that are not UTF-8 load as they are (the planner's hash check
    refuses them) instead of failing the read, and so the request."""
    sid = scope_id(store)
    obs = observe(store, sid, end=h(1))
    with store.transaction():
        store.put_payload(obs.id, "x", 1.0)
    conn_of(store).execute("UPDATE payloads SET size = 2, output_json = CAST(? AS TEXT)",
                           (b"\xffx",))  # fmt: skip
    loaded = store.load_payload(obs.id, max_bytes=100)
    assert loaded is not None and (loaded.output_json, loaded.size) == (b"\xffx", 2)


def test_understated_size_column_is_measured(store: ReasoningStore) -> None:
    sid = scope_id(store)
    obs = observe(store, sid, end=h(1))
    with store.transaction():
        store.put_payload(obs.id, "x" * 100, 1.0)
    conn_of(store).execute("UPDATE payloads SET size = 1")
    with pytest.raises(StoredSizeExceeded, match="is 100 bytes"):
        store.load_payload(obs.id, max_bytes=50)


def test_touch_is_max_of_existing_and_now(store: ReasoningStore, clock: ManualClock) -> None:
    sid = scope_id(store)
    a, b = observe(store, sid, end=h(1)), observe(store, sid, end=h(2))
    with store.transaction():
        store.put_payload(a.id, "[]", clock.wall())
        store.put_payload(b.id, "[]", clock.wall())
    start = clock.wall()

    def touched(obs: Observation) -> float:
        loaded = store.load_payload(obs.id, max_bytes=10)
        assert loaded is not None
        return loaded.touched_at

    clock.jump_wall(-3600)  # the wall clock steps backwards
    with store.transaction():
        store.touch_payloads([a.id], clock.wall())
    assert touched(a) == start
    clock.jump_wall(3600 + TOUCH_GRANULARITY_S + 1)  # past the granularity: rewritten
    with store.transaction():
        store.touch_payloads([a.id, a.id, 999], clock.wall())
    assert (touched(a), touched(b)) == (start + TOUCH_GRANULARITY_S + 1, start)


@pytest.mark.parametrize(
    ("later", "rewritten"),
    [(0.0, False), (1.0, False), (TOUCH_GRANULARITY_S, False),
     (TOUCH_GRANULARITY_S + 0.5, True), (40 * 86_400.0, True)],
)  # fmt: skip
def test_a_touch_within_the_granularity_writes_nothing(
    store: ReasoningStore, clock: ManualClock, later: float, rewritten: bool
) -> None:
    sid = scope_id(store)
    obs = observe(store, sid, end=h(1))
    with store.transaction():
        store.put_payload(obs.id, "[]", clock.wall())
    stored = clock.wall()
    clock.advance(later)
    changes = conn_of(store).total_changes
    with store.transaction():
        store.touch_payloads([obs.id], clock.wall())
    loaded = store.load_payload(obs.id, max_bytes=10)
    assert loaded is not None
    assert loaded.touched_at == (clock.wall() if rewritten else stored)
    assert conn_of(store).total_changes - changes == int(rewritten)  # no row rewritten


@given(st.lists(st.floats(min_value=-2 * 86_400.0, max_value=3 * 86_400.0), max_size=12))
def test_a_stored_touch_lags_the_latest_use_by_less_than_the_granularity(
    steps: list[float],
) -> None:
    """Whatever the clock does between uses: the stored touch never moves back, and it
    is never more than the granularity behind the latest use (expiry allows for that)."""
    with tempfile.TemporaryDirectory() as data:
        clock = ManualClock()
        with ReasoningStore.open(Path(data) / "cache.sqlite", clock=clock) as store:
            sid = scope_id(store)
            obs = observe(store, sid, end=h(1))
            with store.transaction():
                store.put_payload(obs.id, "[]", clock.wall())
            latest = previous = clock.wall()
            for step in steps:
                clock.jump_wall(step)
                latest = max(latest, clock.wall())
                with store.transaction():
                    store.touch_payloads([obs.id], clock.wall())
                loaded = store.load_payload(obs.id, max_bytes=10)
                assert loaded is not None
                assert previous <= loaded.touched_at <= latest
                assert loaded.touched_at >= latest - TOUCH_GRANULARITY_S
                previous = loaded.touched_at


def test_touch_many_payloads_in_chunks(store: ReasoningStore) -> None:
    sid = scope_id(store)
    obs = observe(store, sid, end=h(1))
    with store.transaction():
        store.put_payload(obs.id, "[]", 1.0)
        store.touch_payloads([*range(10_000, 11_200), obs.id], 2.0 + TOUCH_GRANULARITY_S)
    loaded = store.load_payload(obs.id, max_bytes=10)
    assert loaded is not None
    assert loaded.touched_at == 2.0 + TOUCH_GRANULARITY_S
