"""relay.handlers.cache_api's own helpers: timestamps, the ``before`` and ``limit``
parameters, per-provider/per-model counts and the entry rows (the API over HTTP:
tests/integration/test_cache_api.py)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.errors import InvalidRequest
from relay.handlers.cache_api import (
    DEFAULT_LIMIT,
    MAX_ENTRY_ID,
    MAX_LIMIT,
    _add_counts,
    _entry,
    clamp_limit,
    entry_id,
    iso,
)
from relay.storage.strict_store import StrictEntry


@pytest.mark.parametrize(
    ("timestamp", "text"),
    [(None, None), (0.0, "1970-01-01T00:00:00.000Z"), (1_767_225_600.1234, "2026-01-01T00:00:00.123Z")],
)  # fmt: skip
def test_iso(timestamp: float | None, text: str | None) -> None:
    assert iso(timestamp) == text


@pytest.mark.parametrize(
    ("raw", "value"),
    [(None, None), ("1", 1), ("0042", 42), (str(MAX_ENTRY_ID), MAX_ENTRY_ID),
     ("0" * 30 + "7", 7)],
)  # fmt: skip
def test_a_valid_before(raw: str | None, value: int | None) -> None:
    assert entry_id(raw) == value


@pytest.mark.parametrize(
    "raw", ["0", "-1", "+1", "1.5", "", " 1", "x", "²", "\u0661", str(MAX_ENTRY_ID + 1), "9" * 5000]
)
def test_an_invalid_before_is_refused_and_quoted_short(raw: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        entry_id(raw)
    assert info.value.param == "before"
    assert len(str(info.value)) < 200  # a long value is cut, not echoed whole


@given(st.integers(min_value=-(10**6), max_value=10**6))
def test_limit_is_clamped_to_its_range(value: int) -> None:
    assert clamp_limit(str(value)) == max(1, min(MAX_LIMIT, value))


def test_limit_defaults_and_refuses_non_numbers() -> None:
    assert clamp_limit(None) == DEFAULT_LIMIT
    with pytest.raises(InvalidRequest) as info:
        clamp_limit("ten")
    assert info.value.param == "limit"


@dataclass
class Metrics:
    hits: Counter[tuple[str, str]] = field(default_factory=Counter)
    misses: Counter[tuple[str, str]] = field(default_factory=Counter)
    replays: Counter[tuple[str, str]] = field(default_factory=Counter)


def test_counts_fold_into_the_provider_and_model_tables() -> None:
    metrics = Metrics(
        hits=Counter({("ds", "r1"): 2, ("ds", "v3"): 1}),
        misses=Counter({("kimi", "k2"): 3}),
        replays=Counter({("ds", "r1"): 4}),
    )
    by_provider: dict[str, dict[str, int]] = {"ds": {"entries": 5, "chars": 50}}
    _add_counts(by_provider, metrics, index=0)
    assert by_provider == {
        "ds": {"entries": 5, "chars": 50, "hits": 3, "replays": 4},
        "kimi": {"entries": 0, "chars": 0, "misses": 3},  # counted, though nothing stored
    }
    by_model: dict[str, dict[str, int]] = {}
    _add_counts(by_model, metrics, index=1)
    assert by_model == {
        "r1": {"entries": 0, "chars": 0, "hits": 2, "replays": 4},
        "v3": {"entries": 0, "chars": 0, "hits": 1},
        "k2": {"entries": 0, "chars": 0, "misses": 3},
    }


def entry(**changes: Any) -> StrictEntry:
    fields: dict[str, Any] = {
        "id": 9, "provider": "ds", "model": "r1", "scope_digest": "s" * 64,
        "end_digest": "e" * 64, "reasoning": "the thought", "text_digest": "abcdef0123456789",
        "chars": 11, "created_at": 0.0, "touched_at": 0.0, "expires_at": 86_400.0,
        "tool_call_ids": ("call_1", "call_2"),
    }  # fmt: skip
    return StrictEntry(**{**fields, **changes})


def test_an_entry_row_shows_its_text_only_when_asked() -> None:
    row = _entry(entry(), with_text=False)
    assert row["toolCallId"] == "call_1" and row["toolCallIds"] == ["call_1", "call_2"]
    assert row["digest"] == "abcdef012345"  # a prefix, never the whole digest
    assert (row["createdAt"], row["expiresAt"]) == (iso(0.0), iso(86_400.0))
    assert "reasoning" not in row and "the thought" not in repr(row)
    assert _entry(entry(), with_text=True)["reasoning"] == "the thought"
    assert _entry(entry(tool_call_ids=()), with_text=False)["toolCallId"] is None
