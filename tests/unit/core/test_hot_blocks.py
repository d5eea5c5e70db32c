"""The hot cache of verified payloads: exact-row checks, bytes bound."""

from __future__ import annotations

from relay.core.hot_blocks import HotBlocks, VerifiedPayload


def payload(text: bytes, digest: str = "h") -> VerifiedPayload:
    return VerifiedPayload(text, digest, len(text), (), ())


def test_an_entry_serves_only_the_same_hash_and_the_same_text() -> None:
    hot = HotBlocks(100)
    entry = payload(b"[1]")
    hot.put(1, entry)
    assert hot.get(1, "h", b"[1]") is entry
    assert hot.get(2, "h", b"[1]") is None
    assert hot.get(1, "other", b"[1]") is None  # the record names other bytes
    assert len(hot) == 0 and hot.bytes == 0  # and the stale entry is gone
    hot.put(1, entry)
    assert hot.get(1, "h", b"[2]") is None  # the row's text changed
    assert len(hot) == 0 and hot.hits == 1


def test_the_least_recently_used_go_first_when_bytes_run_out() -> None:
    hot = HotBlocks(10)
    for observation_id in (1, 2, 3):
        hot.put(observation_id, payload(b"abc"))
    assert hot.bytes == 9
    assert hot.get(1, "h", b"abc") is not None  # 1 is now the most recent
    hot.put(4, payload(b"abcd"))  # 13 bytes: 2, the least recent, goes
    assert [hot.get(i, "h", t) is not None for i, t in ((2, b"abc"), (3, b"abc"), (4, b"abcd"))] == [
        False, True, True,
    ]  # fmt: skip
    assert hot.bytes <= hot.capacity_bytes


def test_a_payload_over_the_whole_budget_is_never_kept() -> None:
    hot = HotBlocks(4)
    hot.put(1, payload(b"abc"))
    hot.put(1, payload(b"abcdef"))  # replaces, then does not fit
    assert len(hot) == 0 and hot.bytes == 0
    hot.put(2, payload("é".encode()))  # counted in UTF-8 bytes
    assert hot.bytes == 2
