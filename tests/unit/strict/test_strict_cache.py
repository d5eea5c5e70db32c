"""relay.strict.strict_cache: restore/capture over a real store, the clock moved by hand."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.clock import ManualClock
from relay.settings.providers import Provider
from relay.storage.replay_store import ReasoningStore
from relay.strict.rules import OnMiss, StrictRule, Turns
from relay.strict.strict_cache import PreparedRequest, StrictCache, StrictTarget
from tests.support.sqlite_store import sqlite_store

TTL = 7200.0
PROVIDER = Provider("deepseek", "chat", "http://127.0.0.1:9/v1", "sk-provider", None, "K")
TOOLS_RULE = StrictRule("t", Turns.TOOL_CALLS, OnMiss.EMPTY)
ALL_RULE = StrictRule("a", Turns.ALL_WITH_TOOLS, OnMiss.ABSENT)
USER = {"role": "user", "content": "CALL_TOOL"}


def target(
    rule: StrictRule | None = TOOLS_RULE, caller: str | None = None, **kw: Any
) -> StrictTarget:
    return StrictTarget(
        kw.get("provider", PROVIDER), kw.get("model", "deepseek-chat"), rule, caller
    )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "cache.sqlite"


def open_cache(path: Path, clock: ManualClock, **kw: Any) -> StrictCache:
    store = ReasoningStore.open(path, clock=clock)
    options: dict[str, Any] = {"ttl_s": TTL, "memory_entries": 100, "max_entry_bytes": 1 << 20}
    return StrictCache(clock=clock, store=store, relay_token="t" * 20, **{**options, **kw})


@pytest.fixture
def cache(path: Path, clock: ManualClock) -> Iterator[StrictCache]:
    opened = open_cache(path, clock)
    yield opened
    assert opened.store is not None
    opened.store.close()


def answer(prepared: PreparedRequest, *, reasoning: str, content: str = "",
           calls: tuple[tuple[str, str], ...] | list[tuple[str, str]] = ()) -> dict[str, Any]:  # fmt: skip
    """Feed a JSON answer to the capture; the assistant message the client echoes back."""
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": "grep", "arguments": a}}
            for i, a in calls
        ]
    assert prepared.capture is not None
    prepared.capture.feed_completion(
        {"choices": [{"index": 0, "message": {**message, "reasoning_content": reasoning}}]}
    )
    return message


def turn(cache: StrictCache, messages: list[Any], t: StrictTarget | None = None,
         tools: bool = True) -> PreparedRequest:  # fmt: skip
    return cache.prepare(t or target(), messages, tools_present=tools, request_id="req")


def test_a_tool_chain_is_restored_by_identity(cache: StrictCache) -> None:
    first = turn(cache, [USER])
    echo = answer(first, reasoning="thought one", calls=[("call_1", '{"q":"x"}')])
    assert cache.commit(first, "req") == 1
    history = [USER, echo, {"role": "tool", "tool_call_id": "call_1", "content": "out"}]
    second = turn(cache, history)
    assert second.messages[1] == {**echo, "reasoning_content": "thought one"}
    assert second.messages[0] is USER
    assert history[1] is echo and "reasoning_content" not in echo  # input untouched
    metrics = cache.metrics
    key = ("deepseek", "deepseek-chat")
    assert (metrics.hits[key], metrics.misses[key], metrics.replays[key]) == (1, 0, 1)
    assert metrics.sources == {"memory/identity": 1}


def test_a_resent_history_is_rendered_once_and_restored_alike(cache: StrictCache) -> None:
    first = turn(cache, [USER])
    echo = answer(first, reasoning="thought one", calls=[("call_1", '{"q":"x"}')])
    cache.commit(first, "req")
    assert len(cache.rendered) == 1  # the user message
    history = [USER, echo, {"role": "tool", "tool_call_id": "call_1", "content": "out"}]
    second = turn(cache, history)
    assert len(cache.rendered) == 3
    # Fresh objects with the same values: found in the memo, nothing new remembered, and
    # the same identity and restoration as the rendered turn.
    again = turn(cache, json.loads(json.dumps(history)))
    assert len(cache.rendered) == 3
    assert again.history == second.history is not None
    assert again.messages == second.messages
    assert again.messages[1]["reasoning_content"] == "thought one"
    # Another value (the tool output as a list of parts) is another entry, another identity.
    changed = [*history[:2], {"role": "tool", "tool_call_id": "call_1", "content": ["out"]}]
    other = turn(cache, changed)
    assert len(cache.rendered) == 4 and other.history != second.history


def test_tool_call_id_finds_a_respelled_echo(cache: StrictCache) -> None:
    first = turn(cache, [USER])
    echo = answer(first, reasoning="thought", calls=[("call_1", '{"q": "x"}')])  # not compact
    cache.commit(first, "req")
    # The client sends the arguments exactly as received: the identity differs, the id not.
    second = turn(cache, [USER, echo, {"role": "tool", "tool_call_id": "call_1", "content": "o"}])
    assert second.messages[1]["reasoning_content"] == "thought"
    assert cache.metrics.sources == {"memory/tool_call": 1}


def test_plain_turns_under_every_turn_rule(cache: StrictCache) -> None:
    t = target(ALL_RULE)
    first = turn(cache, [USER], t)
    echo = answer(first, reasoning="plain thought", content="Hello")
    cache.commit(first, "req")
    history = [USER, echo, {"role": "user", "content": "more"}]
    assert turn(cache, history, t).messages[1]["reasoning_content"] == "plain thought"
    # Without tools in the request, a plain turn needs nothing.
    assert "reasoning_content" not in turn(cache, history, t, tools=False).messages[1]


def test_a_miss_follows_the_rule_and_never_invents(cache: StrictCache) -> None:
    unknown = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_9", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}  # fmt: skip
    history = [USER, unknown, {"role": "tool", "tool_call_id": "call_9", "content": "o"}]
    assert turn(cache, history).messages[1]["reasoning_content"] == ""
    absent = target(StrictRule("x", Turns.TOOL_CALLS, OnMiss.ABSENT))
    assert "reasoning_content" not in turn(cache, history, absent).messages[1]
    key = ("deepseek", "deepseek-chat")
    assert cache.metrics.misses[key] == 2
    assert cache.metrics.filled_empty[key] == 1


def test_scopes_keep_callers_models_and_keys_apart(cache: StrictCache) -> None:
    first = turn(cache, [USER])
    echo = answer(first, reasoning="mine", calls=[("call_1", "{}")])
    cache.commit(first, "req")
    history = [USER, echo, {"role": "tool", "tool_call_id": "call_1", "content": "o"}]
    other_key = Provider("deepseek", "chat", PROVIDER.base_url, "sk-other", None, "K")
    for other in (target(caller="bob"), target(model="deepseek-v4"), target(provider=other_key)):
        assert turn(cache, history, other).messages[1]["reasoning_content"] == ""
    assert turn(cache, history).messages[1]["reasoning_content"] == "mine"


def test_no_reasoning_and_unkeyable_answers_are_skipped(cache: StrictCache) -> None:
    first = turn(cache, [USER])
    answer(first, reasoning="", content="hi")
    assert cache.commit(first, "req") == 0
    second = turn(cache, [USER])
    answer(second, reasoning="r", calls=[("call_1", '{"x": 1.0}')])  # unpredictable args
    assert cache.commit(second, "req") == 1  # still indexed by its tool-call id
    assert cache.metrics.skipped == {"no_reasoning": 1}
    third = turn(cache, [USER])
    assert third.capture is not None
    third.capture.feed_completion({"choices": [{"index": 0, "message": {
        "role": "assistant", "content": "x", "refusal": "no", "reasoning_content": "r"}}]})  # fmt: skip
    assert cache.commit(third, "req") == 0
    assert cache.metrics.skipped["unknown_prediction"] == 1


def test_ttl_slides_on_use_and_expires_after_a_clock_jump(
    cache: StrictCache, clock: ManualClock
) -> None:
    first = turn(cache, [USER])
    echo = answer(first, reasoning="thought", calls=[("call_1", "{}")])
    cache.commit(first, "req")
    history = [USER, echo, {"role": "tool", "tool_call_id": "call_1", "content": "o"}]
    clock.advance(TTL * 0.75)
    used = turn(cache, history)
    assert used.messages[1]["reasoning_content"] == "thought"
    cache.commit(used, "req")  # its answer completed: slides to now+TTL
    clock.advance(TTL * 0.75)  # 1.5 TTL after capture, 0.75 after the last use
    assert turn(cache, history).messages[1]["reasoning_content"] == "thought"
    clock.jump_wall(TTL + 1)
    assert turn(cache, history).messages[1]["reasoning_content"] == ""  # expired: a miss
    assert cache.metrics.rejected == {"record_expired": 2}  # by identity, then by call id
    assert cache.cleanup() == 1
    assert cache.store is not None and cache.store.strict.stats(0).entries == 0


def test_preparing_writes_nothing_a_refused_request_slides_nothing(
    path: Path, clock: ManualClock
) -> None:
    """A request refused before it is forwarded (prepared, never committed) leaves the
    store as it was: no touch, no record; the slide comes with the answer's commit."""
    cache = open_cache(path, clock, memory_entries=0)  # every lookup reads the disk
    first = turn(cache, [USER])
    echo = answer(first, reasoning="thought", calls=[("call_1", "{}")])
    cache.commit(first, "req")
    store = sqlite_store(cache.store)
    conn = store._conn
    assert conn is not None
    writes: list[str] = []
    conn.set_trace_callback(writes.append)
    history = [USER, echo, {"role": "tool", "tool_call_id": "call_1", "content": "o"}]
    captured_at = clock.wall()
    clock.advance(60)
    refused = turn(cache, history)
    assert refused.messages[1]["reasoning_content"] == "thought" and refused.used
    assert writes and not [sql for sql in writes if not sql.lstrip().startswith("SELECT")]
    row = store.strict.get(refused.used[0].entry_id or 0)
    assert row is not None and row.expires_at == captured_at + TTL  # not slid
    writes.clear()
    cache.commit(refused, "req")  # the answer completed: now it slides
    assert [sql for sql in writes if sql.lstrip().startswith("UPDATE strict_entries")]
    row = store.strict.get(row.id)
    assert row is not None and row.expires_at == captured_at + 60 + TTL
    conn.set_trace_callback(None)
    store.close()


def test_cleanup_drops_expired_memory_and_rows(cache: StrictCache, clock: ManualClock) -> None:
    for n in range(3):
        prepared = turn(cache, [{"role": "user", "content": str(n)}])
        answer(prepared, reasoning=f"r{n}", content=f"c{n}")
        cache.commit(prepared, "req")
        clock.advance(1000)
    clock.jump_wall(TTL - 1500)  # the first two are past their expiry
    assert cache.cleanup() == 2
    assert len(cache.memory) == 1
    path = sqlite_store(cache.store).path  # and the WAL was emptied into the database after it
    assert path.with_name(path.name + "-wal").stat().st_size == 0


def test_after_a_restart_the_first_lookup_is_served_from_disk(
    path: Path, clock: ManualClock
) -> None:
    cache = open_cache(path, clock)
    first = turn(cache, [USER])
    echo = answer(first, reasoning="durable", calls=[("call_1", "{}")])
    cache.commit(first, "req")
    assert cache.store is not None
    cache.store.close()
    restarted = open_cache(path, clock)
    history = [USER, echo, {"role": "tool", "tool_call_id": "call_1", "content": "o"}]
    assert turn(restarted, history).messages[1]["reasoning_content"] == "durable"
    assert turn(restarted, history).messages[1]["reasoning_content"] == "durable"
    assert restarted.metrics.sources == {"disk/identity": 1, "memory/identity": 1}
    assert restarted.store is not None
    restarted.store.close()


def test_a_tampered_row_is_a_miss_with_a_reason(path: Path, clock: ManualClock) -> None:
    cache = open_cache(path, clock, memory_entries=0)  # every lookup reads the disk
    first = turn(cache, [USER])
    echo = answer(first, reasoning="genuine", calls=[("call_1", "{}")])
    cache.commit(first, "req")
    conn = sqlite_store(cache.store)._conn
    assert conn is not None
    conn.execute("UPDATE strict_entries SET reasoning = 'forged'")
    history = [USER, echo, {"role": "tool", "tool_call_id": "call_1", "content": "o"}]
    assert turn(cache, history).messages[1]["reasoning_content"] == ""
    # Refused once by identity, once by tool-call id: never the forged text.
    assert cache.metrics.rejected == {"payload_digest_mismatch": 2}
    sqlite_store(cache.store).close()


def test_store_failures_fall_back_to_memory(path: Path, clock: ManualClock) -> None:
    cache = open_cache(path, clock)
    assert cache.store is not None
    cache.store.close()  # every store call now fails with a StoreError
    first = turn(cache, [USER])
    echo = answer(first, reasoning="in memory", calls=[("call_1", "{}")])
    assert cache.commit(first, "req") == 1
    history = [USER, echo, {"role": "tool", "tool_call_id": "call_1", "content": "o"}]
    assert turn(cache, history).messages[1]["reasoning_content"] == "in memory"
    assert cache.metrics.store_failures == 1  # the write; the hit came from memory
    assert cache.cleanup() == 0


def test_non_strict_and_legacy_rules_strip(cache: StrictCache) -> None:
    sent = [USER, {"role": "assistant", "content": "x", "reasoning_content": "kept by client"}]
    for rule in (None, StrictRule("legacy", Turns.REJECTS, OnMiss.ABSENT)):
        prepared = turn(cache, sent, target(rule))
        assert prepared.messages[1] == {"role": "assistant", "content": "x"}
        assert prepared.stripped == 1 and prepared.capture is None
    assert cache.metrics.stripped[("deepseek", "deepseek-chat")] == 2


def test_off_restores_and_captures_nothing() -> None:
    cache = StrictCache(clock=ManualClock(), store=None, relay_token="t" * 20, ttl_s=TTL,
                        memory_entries=10, max_entry_bytes=1000)  # fmt: skip
    history = [USER, {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
               "function": {"name": "f", "arguments": "{}"}}]}]  # fmt: skip
    prepared = turn(cache, history)
    assert prepared.messages == history and prepared.capture is None
    assert cache.commit(prepared, "req") == 0
    assert cache.stats().store is None
    assert cache.entries().entries == ()
    assert (
        cache.clear() == 0 and cache.clear_provider("x") == 0 and cache.delete_tool_call("c") == 0
    )
    cache.start_cleanup()  # a no-op when off
    assert cache._cleanup is None


def test_an_oversized_history_still_uses_tool_call_ids(cache: StrictCache) -> None:
    first = turn(cache, [USER])
    echo = answer(first, reasoning="r", calls=[("call_1", "{}")])
    cache.commit(first, "req")
    huge = {"role": "user", "content": "x" * (70 * 1024 * 1024)}  # over the canonical limit
    prepared = turn(
        cache, [huge, USER, echo, {"role": "tool", "tool_call_id": "call_1", "content": "o"}]
    )
    assert prepared.history is None
    assert prepared.messages[2]["reasoning_content"] == "r"


def test_administration(cache: StrictCache) -> None:
    for n, provider in enumerate(("deepseek", "kimi", "deepseek")):
        t = target(provider=Provider(provider, "chat", PROVIDER.base_url, "k", None, "K"))
        prepared = turn(cache, [{"role": "user", "content": str(n)}], t)
        answer(prepared, reasoning=f"r{n}", calls=[(f"call_{n}", "{}")])
        cache.commit(prepared, "req")
    stats = cache.stats()
    assert stats.memory_entries == 3 and stats.store is not None and stats.store.entries == 3
    assert [e.reasoning for e in cache.entries(provider="deepseek").entries] == ["r2", "r0"]
    assert cache.delete_tool_call("call_0") == 1
    assert cache.clear_provider("kimi") == 1
    assert len(cache.memory) == 1
    assert cache.clear() == 1
    assert len(cache.memory) == 0 and cache.metrics.captured == {}
    after = cache.stats().store
    assert after is not None and (after.entries, after.by_provider) == (0, {})
