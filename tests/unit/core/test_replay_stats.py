"""Replay outcome counters: totals, reasons and per-scope rows add up."""

from __future__ import annotations

from relay.core.rejection import RejectionKind
from relay.core.replay_stats import ReplayStats


def test_empty_stats_are_zero() -> None:
    assert ReplayStats().to_json() == {
        "dispatched": 0,
        "accepted": 0,
        "rejected": 0,
        "resent": 0,
        "rejectedByReason": {},
        "byScope": [],
    }


def test_outcomes_are_totalled_and_split_by_scope_kind_and_model() -> None:
    stats = ReplayStats()
    for _ in range(3):
        stats.count("chat", "gpt-5", "dispatched")
    stats.count("chat", "gpt-5", "accepted")
    stats.count_rejected("chat", "gpt-5", RejectionKind.INVALID_ENCRYPTED_CONTENT)
    stats.count_rejected("chat", "gpt-5", RejectionKind.INVALID_ENCRYPTED_CONTENT)
    stats.count("chat", "gpt-5", "resent")
    stats.count("responses", "o4-mini", "dispatched")
    stats.count_rejected("responses", "o4-mini", RejectionKind.ITEM_NOT_FOUND)
    assert stats.to_json() == {
        "dispatched": 4,
        "accepted": 1,
        "rejected": 3,
        "resent": 1,
        "rejectedByReason": {"invalid_encrypted_content": 2, "item_not_found": 1},
        "byScope": [
            {"kind": "chat", "model": "gpt-5", "dispatched": 3, "accepted": 1,
             "rejected": {"invalid_encrypted_content": 2}, "resent": 1},
            {"kind": "responses", "model": "o4-mini", "dispatched": 1, "accepted": 0,
             "rejected": {"item_not_found": 1}, "resent": 0},
        ],
    }  # fmt: skip
