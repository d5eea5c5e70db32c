"""Last-hour growth, error tallies and label bounding (relay.ops.window), pure."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.ops.window import MAX_CODES, CounterHistory, ErrorTally, bounded_code


@pytest.mark.parametrize(("code", "label"), [
    ("upstream_timeout", "upstream_timeout"),
    ("rate_limit_exceeded", "rate_limit_exceeded"),
    ("Bad Code", "other"),  # not a reason code: could be anything an upstream sent
    ("req_0123456789abcdef0123456789abcdef0123456789abcdef", "other"),  # too long: an id
    ("", "other"),
    ("ünïcode", "other"),
])  # fmt: skip
def test_codes_become_bounded_labels(code: str, label: str) -> None:
    assert bounded_code(code, set()) == label


def test_at_most_max_codes_distinct_labels() -> None:
    known: set[str] = set()
    labels = {bounded_code(f"code_{i}", known) for i in range(MAX_CODES + 10)}
    assert len(labels) == MAX_CODES + 1 and "other" in labels
    assert bounded_code("code_0", known) == "code_0"  # a known one stays itself


def test_error_tally_counts_and_orders_by_last_seen() -> None:
    tally = ErrorTally()
    tally.add("upstream_timeout", 10.0)
    tally.add("client_gone", 20.0)
    tally.add("upstream_timeout", 30.0)
    assert tally.latest() == [
        {"code": "upstream_timeout", "count": 2, "lastAt": 30.0},
        {"code": "client_gone", "count": 1, "lastAt": 20.0},
    ]
    assert tally.latest(limit=1)[0]["code"] == "upstream_timeout"


def test_growth_covers_since_start_until_the_span_has_passed() -> None:
    history = CounterHistory(span_s=3600, every_s=60)
    history.record(0.0, {"dispatched": 0})
    history.record(600.0, {"dispatched": 5})
    assert history.growth(1200.0, {"dispatched": 9}) == ({"dispatched": 9}, 1200.0)


def test_growth_is_over_the_last_span_once_it_has_passed() -> None:
    history = CounterHistory(span_s=3600, every_s=60)
    for minute in range(0, 181):  # three hours, one sample a minute, +1 per minute
        history.record(minute * 60.0, {"n": minute})
    grown, covered = history.growth(180 * 60.0, {"n": 180})
    assert grown == {"n": 60} and covered == 3600.0
    assert len(history._samples) <= 3600 / 60 + 2  # bounded memory


def test_samples_closer_than_every_s_are_dropped() -> None:
    history = CounterHistory(span_s=3600, every_s=60)
    history.record(0.0, {"n": 0})
    history.record(30.0, {"n": 7})  # too soon: ignored
    assert len(history._samples) == 1


def test_no_samples_means_everything_since_start() -> None:
    assert CounterHistory().growth(5.0, {"n": 3}) == ({"n": 3}, 0.0)


@settings(max_examples=200)
@given(st.lists(st.tuples(st.floats(0, 600), st.integers(0, 5)), min_size=1, max_size=80))
def test_growth_never_exceeds_totals_nor_goes_negative(steps: list[tuple[float, int]]) -> None:
    """Any sequence of (time passing, events): growth is within [0, total] and covers at
    most the span (plus one sampling interval)."""
    history = CounterHistory(span_s=3600, every_s=60)
    now, total = 0.0, 0
    history.record(now, {"n": 0})
    for gap, events in steps:
        now += gap
        total += events
        history.record(now, {"n": total})
        grown, covered = history.growth(now, {"n": total})
        assert 0 <= grown["n"] <= total
        assert covered <= now and covered <= 3600 + 600 + 60
