"""relay.core.token_usage: outcomes from X-Relay-Replay, usage from the final event,
summaries, prices and the latency histogram."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.core import replay_header
from relay.core import token_usage as tu
from relay.core.planner import Plan, Rejection
from relay.core.receipts import Reason


@pytest.mark.parametrize(("header", "outcome", "blocks"), [
    ("replayed=3", tu.Outcome.REPLAYED, 3),
    ("replayed=0", tu.Outcome.NOTHING, 0),
    ("none; reason=nothing_to_replay", tu.Outcome.NOTHING, 0),
    ("none; reason=unmatched", tu.Outcome.NOTHING, 0),
    ("none; reason=stale_generation", tu.Outcome.NOTHING, 0),
    ("none; reason=memory_pressure", tu.Outcome.NOTHING, 0),
    ("none; reason=capacity_bypass", tu.Outcome.CAPACITY, 0),
    ("none; reason=canonical_limit", tu.Outcome.LIMIT, 0),
    ("none; reason=underivable_history", tu.Outcome.UNDERIVABLE, 0),
    ("none; reason=responses_passthrough", tu.Outcome.FENCED, 0),
    ("none; reason=replay_rejected", tu.Outcome.RESENT, 0),
    ("none; reason=not_a_reasoning_model", tu.Outcome.NOT_REASONING, 0),
    ("none; reason=chat_provider", tu.Outcome.OTHER, 0),
    ("off", tu.Outcome.CACHE_OFF, 0),
    (None, tu.Outcome.OTHER, 0),
    ("none; reason=something_new", tu.Outcome.OTHER, 0),
    ("replayed=x", tu.Outcome.OTHER, 0),
])  # fmt: skip
def test_classify(header: str | None, outcome: tu.Outcome, blocks: int) -> None:
    assert tu.classify(header) == (outcome, blocks)


@given(st.integers(min_value=1, max_value=10_000))
def test_every_plan_with_blocks_classifies_as_replayed(n: int) -> None:
    assert tu.classify(f"replayed={n}") == (tu.Outcome.REPLAYED, n)


@pytest.mark.parametrize("reason", list(Reason))
def test_every_plan_rejection_header_is_eligible_or_a_bypass(reason: Reason) -> None:
    header = replay_header.for_plan(Plan(rejections=(Rejection(reason, 1),)))
    outcome, _ = tu.classify(header)
    assert outcome is not tu.Outcome.OTHER


FULL = {
    "input_tokens": 2048,
    "input_tokens_details": {"cached_tokens": 1536, "cache_write_tokens": 256},
    "output_tokens": 300,
    "output_tokens_details": {"reasoning_tokens": 200},
    "total_tokens": 2348,
}


@pytest.mark.parametrize(("event_type", "data", "usage"), [
    ("response.completed", {"response": {"usage": FULL}}, tu.Usage(2048, 1536, 256, 300, 200)),
    ("response.incomplete", {"response": {"usage": {"input_tokens": 5, "output_tokens": 1}}},
     tu.Usage(5, 0, 0, 1, 0)),
    ("response.failed", {"response": {"usage": {"input_tokens": 7, "cache_write_tokens": 3}}},
     tu.Usage(7, 0, 3, 0, 0)),
    ("response", {"usage": FULL}, tu.Usage(2048, 1536, 256, 300, 200)),
    ("response.completed", {"response": {"usage": None}}, None),
    ("response.completed", {"response": {}}, None),
    ("response.output_text.delta", {"delta": "x"}, None),
    ("response.completed", {"response": {"usage": {"input_tokens": -1, "output_tokens": True}}},
     tu.Usage()),
])  # fmt: skip
def test_usage_of_event(event_type: str, data: Any, usage: tu.Usage | None) -> None:
    assert tu.usage_of_event(event_type, data) == usage


def test_model_labels_are_bounded() -> None:
    known: set[str] = set()
    assert tu.model_label("gpt-5.1-codex", known, limit=2) == "gpt-5.1-codex"
    assert tu.model_label("o3", known, limit=2) == "o3"
    assert tu.model_label("another", known, limit=2) == tu.OTHER
    assert tu.model_label("gpt-5.1-codex", known, limit=2) == "gpt-5.1-codex"
    assert tu.model_label("has space", set()) == tu.OTHER
    assert tu.model_label(None, set()) == tu.OTHER
    assert tu.model_label("x" * 65, set()) == tu.OTHER


def key(outcome: tu.Outcome, model: str = "m") -> tu.Key:
    return tu.Key(0, "chat", model, outcome.value)


def test_summary_splits_with_and_without_replay() -> None:
    rows = [
        (key(tu.Outcome.REPLAYED), tu.Tally(2, 2, 5, 4000, 3000, 0, 100, 60)),
        (key(tu.Outcome.NOTHING), tu.Tally(1, 1, 0, 2000, 500, 10, 50, 20)),
        (key(tu.Outcome.CACHE_OFF), tu.Tally(1, 1, 0, 2000, 500, 0, 50, 20)),
    ]
    summary = tu.summarize(rows)
    assert summary.with_replay == tu.Share(3000, 4000)
    assert summary.without_replay == tu.Share(1000, 4000)
    assert summary.total.reasoning_tokens == 100
    doc = summary.to_json()
    assert doc["withReplay"]["share"] == 0.75
    assert doc["withoutReplay"]["share"] == 0.25
    assert doc["replayedBlocks"] == 5
    assert doc["byOutcome"]["cache_off"]["requests"] == 1


def test_an_empty_share_has_no_ratio() -> None:
    assert tu.Share(0, 0).to_json()["share"] is None


@given(st.lists(st.tuples(st.sampled_from(list(tu.Outcome)),
                          st.integers(0, 10**6), st.integers(0, 10**6)), max_size=20))  # fmt: skip
def test_summary_conserves_tokens(rows: list[tuple[tu.Outcome, int, int]]) -> None:
    tallies = [(key(o), tu.Tally(1, 1, 0, i + c, c)) for o, i, c in rows]
    summary = tu.summarize(tallies)
    assert summary.with_replay.total + summary.without_replay.total == sum(
        t.input_tokens for _, t in tallies
    )
    assert summary.with_replay.cached + summary.without_replay.cached == sum(c for _, _, c in rows)
    assert summary.total.requests == len(rows)


@pytest.mark.parametrize(("data", "message"), [
    ([], ": expected a JSON object"),
    ({"m": 1}, "['m']: expected an object"),
    ({"m": {"input": 1, "cached_input": 0.1}}, "['m'].output: expected a price"),
    ({"m": {"input": -1, "cached_input": 0.1, "output": 1}}, "['m'].input: expected a price"),
    ({"m": {"input": True, "cached_input": 0.1, "output": 1}}, "['m'].input: expected"),
    ({"m": {"input": 1, "cached_input": 0.1, "output": 1, "x": 2}}, "['m']: unknown key 'x'"),
])  # fmt: skip
def test_price_errors_say_what_to_fix(data: Any, message: str) -> None:
    with pytest.raises(tu.PriceError) as caught:
        tu.parse_prices(data)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_estimate_prices_the_extra_cached_share() -> None:
    prices = tu.parse_prices({"m": {"input": 2, "cached_input": 0.5, "output": 8}})
    rows = [
        # with replay: 80% cached of 1M; without: 40% cached of 1M
        (key(tu.Outcome.REPLAYED), tu.Tally(1, 1, 1, 1_000_000, 800_000, 0, 100_000)),
        (key(tu.Outcome.NOTHING), tu.Tally(1, 1, 0, 1_000_000, 400_000, 0, 100_000)),
        (key(tu.Outcome.REPLAYED, "unpriced"), tu.Tally(1, 1, 1, 10**6, 10**6)),
    ]
    est = tu.estimate(rows, prices)
    assert est["models"] == ["m"]
    # spend: (0.2*2 + 0.8*0.5 + 0.1*8) + (0.6*2 + 0.4*0.5 + 0.1*8)
    assert est["cost"] == pytest.approx(1.6 + 2.2)
    # saving: (800k - 0.4*1M) cached tokens * (2 - 0.5) per million
    assert est["saving"] == pytest.approx(0.6)


@pytest.mark.parametrize(("seconds", "bound"), [
    (0.0, 1), (0.0005, 1), (0.001, 1), (0.0011, 2), (0.004, 5), (0.9, 1000), (2.0, tu.OVERFLOW_MS),
    (-1.0, 1),
])  # fmt: skip
def test_latency_bucket(seconds: float, bound: int) -> None:
    assert tu.latency_bucket(seconds) == bound


def test_percentiles_of_a_histogram() -> None:
    histogram = {1: 50, 5: 45, 100: 5}
    assert tu.percentile(histogram, 0.5) == 1
    assert tu.percentile(histogram, 0.95) == 5
    assert tu.percentile(histogram, 0.96) == 100
    assert tu.percentile({}, 0.5) is None
    assert tu.latency_summary(histogram) == {"count": 100, "p50Ms": 1, "p95Ms": 5}


@given(st.lists(st.floats(0, 5, allow_nan=False), min_size=1, max_size=50))
def test_p50_is_at_most_p95(samples: list[float]) -> None:
    histogram: dict[int, int] = {}
    for s in samples:
        histogram[tu.latency_bucket(s)] = histogram.get(tu.latency_bucket(s), 0) + 1
    p50, p95 = tu.percentile(histogram, 0.5), tu.percentile(histogram, 0.95)
    assert p50 is not None and p95 is not None and p50 <= p95
    assert p95 >= tu.latency_bucket(sorted(samples)[int(0.95 * len(samples)) - 1])


def test_hour_of_rounds_down() -> None:
    assert tu.hour_of(7199.9) == 3600
    assert tu.hour_of(7200) == 7200


def test_hour_delta_merge_and_since() -> None:
    a, b = tu.HourDelta(), tu.HourDelta()
    a.tallies.add(tu.Key(0, "chat", "m", "replayed"), tu.Tally(requests=1))
    b.tallies.add(tu.Key(0, "chat", "m", "replayed"), tu.Tally(requests=2))
    b.tallies.add(tu.Key(3600, "chat", "m", "replayed"), tu.Tally(requests=5))
    b.events[3600, "fenced", "direct_responses"] += 1
    a.merge(b)
    assert a.tallies.by_key[tu.Key(0, "chat", "m", "replayed")].requests == 3
    assert list(a.tallies.since(3600).by_key) == [tu.Key(3600, "chat", "m", "replayed")]
    assert not a.empty() and tu.HourDelta().empty()
