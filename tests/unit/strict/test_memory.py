"""relay.strict.memory: the bounded LRU in front of the strict store."""

from __future__ import annotations

from relay.strict.memory import CachedReasoning, ReasoningLru


def entry(n: int, *, end: str | None = "e", calls: tuple[str, ...] = (), text: str = "r",
          scope: str = "s") -> CachedReasoning:  # fmt: skip
    return CachedReasoning(n, scope, None if end is None else f"{end}{n}", calls, "p", "m",
                           text, 100.0)  # fmt: skip


def test_found_by_end_digest_and_by_tool_call_id_within_the_scope() -> None:
    lru = ReasoningLru(10)
    a = entry(1, calls=("call_a", "call_b"))
    lru.put(a)
    assert lru.by_end("s", "e1") is a
    assert lru.by_tool_call("s", "call_b") is a
    assert lru.by_end("other", "e1") is None
    assert lru.by_tool_call("other", "call_a") is None


def test_least_recently_used_goes_first() -> None:
    lru = ReasoningLru(2)
    a, b, c = entry(1, calls=("ca",)), entry(2), entry(3)
    lru.put(a)
    lru.put(b)
    assert lru.by_end("s", "e1") is a  # a is now the most recent
    lru.put(c)
    assert lru.by_end("s", "e2") is None
    assert [e.entry_id for e in lru] == [1, 3]
    lru.put(entry(4))
    assert lru.by_tool_call("s", "ca") is None  # its index went with it
    assert len(lru) == 2


def test_byte_bound() -> None:
    lru = ReasoningLru(100, max_bytes=10)
    lru.put(entry(1, text="x" * 6))
    lru.put(entry(2, text="é" * 3))  # 6 bytes
    assert [e.entry_id for e in lru] == [2]
    assert lru.bytes == 6
    lru.put(entry(3, text="x" * 11))  # larger than the bound: not kept at all
    assert len(lru) == 0 and lru.bytes == 0


def test_zero_entries_keeps_nothing() -> None:
    lru = ReasoningLru(0)
    lru.put(entry(1))
    assert len(lru) == 0


def test_same_end_digest_replaces_and_tool_ids_repoint() -> None:
    lru = ReasoningLru(10)
    old = CachedReasoning(1, "s", "e", ("c1", "c2"), "p", "m", "old", 1.0)
    new = CachedReasoning(2, "s", "e", ("c2",), "p", "m", "new", 1.0)
    lru.put(old)
    lru.put(new)
    assert lru.by_end("s", "e") is new
    assert lru.by_tool_call("s", "c2") is new
    assert lru.by_tool_call("s", "c1") is None  # went with the replaced entry
    other = CachedReasoning(3, "s", None, ("c2",), "p", "m", "newest", 1.0)
    lru.put(other)
    assert lru.by_tool_call("s", "c2") is other
    lru.discard(other)
    assert lru.by_tool_call("s", "c2") is None  # not pointing back at a dropped entry
    assert lru.by_end("s", "e") is new


def test_remove_where_and_discard() -> None:
    lru = ReasoningLru(10)
    for n in range(5):
        lru.put(entry(n, calls=(f"c{n}",)))
    assert lru.remove_where(lambda e: (e.entry_id or 0) % 2 == 0) == 3
    assert [e.entry_id for e in lru] == [1, 3]
    lru.discard(lru.by_end("s", "e1") or entry(99))
    assert [e.entry_id for e in lru] == [3]
    lru.discard(entry(42))  # not held: nothing happens
    assert len(lru) == 1
