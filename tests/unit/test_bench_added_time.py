"""The bench's paired added-time row: per-round differences and ratios, and its verdicts."""

from __future__ import annotations

import itertools

import pytest

from bench.__main__ import added_report, contestants_report
from bench.contestants import MODES as CONTESTANTS
from bench.contestants import rotation, summarize
from bench.servers import added_time
from bench.shared_store import shared_store_report

# Three rounds whose machine speed drifts. Cache on: the rounds' own differences are 1, 10
# and 10 ms (median 10), while the difference of the modes' medians, 15 - 10, would mix
# rounds taken at different speeds.
DRIFTING = {
    "direct": [0.010, 0.020, 0.005],
    "relay": [0.012, 0.022, 0.007],
    "relay_cache": [0.011, 0.030, 0.015],
}


def test_added_time_is_the_median_of_each_rounds_own_difference() -> None:
    added = added_time(DRIFTING)
    assert added["relay_s"] == pytest.approx(0.002)
    assert added["relay_cache_s"] == pytest.approx(0.010)
    assert added["relay_ratio"] == pytest.approx(1.2)  # ratios 1.2, 1.1, 1.4
    assert added["relay_cache_ratio"] == pytest.approx(1.5)  # ratios 1.1, 1.5, 3.0


@pytest.mark.parametrize(("added_on_s", "verdict"), [(0.0029, "≤ 3: met"), (0.0031, "≤ 3: MISSED")])
def test_the_small_row_is_judged_against_the_cache_on_target(
    added_on_s: float, verdict: str
) -> None:
    added = {"relay_s": 0.001, "relay_cache_s": added_on_s, "relay_ratio": 1.1,
             "relay_cache_ratio": 1.3}  # fmt: skip
    ttft = {"direct": 0.010, "relay": 0.011, "relay_cache": 0.013}
    servers = {"iterations": 30, "rows": {"ttft_s": ttft}, "added": added,
               "load_average": [1.5, 1.25]}  # fmt: skip
    lines = added_report({"servers": servers})
    row = next(line for line in lines[1].splitlines() if line.startswith("| small"))
    assert verdict in row
    assert "1.50 → 1.25" in row


def test_the_shared_store_report_says_why_it_was_skipped_or_shows_both_rows() -> None:
    assert shared_store_report({"skipped": "no initdb"}) == [
        "Shared PostgreSQL store: skipped (no initdb)"
    ]
    lines = shared_store_report({
        "ttft": {"messages": 201, "sqlite_s": 0.0612, "postgresql_s": 0.0841,
                 "postgresql_minus_sqlite_s": 0.0169},
        "iterations": 20, "concurrency": 8, "turns": 6,
        "throughput": {"1": {"requests": 48, "seconds": 2.4, "requests_per_s": 20.0},
                       "2": {"requests": 48, "seconds": 1.6, "requests_per_s": 30.0}},
    })  # fmt: skip
    assert "| PostgreSQL - SQLite (paired) | +16.90 |" in lines
    assert lines[-2:] == ["| 1 | 48 | 2.40 | 20.0 |", "| 2 | 48 | 1.60 | 30.0 |"]


@pytest.mark.parametrize("modes", [CONTESTANTS, (*CONTESTANTS, "litellm")])
def test_the_contestants_rotate_so_no_contestant_serves_twice_in_a_row(
    modes: tuple[str, ...],
) -> None:
    orders = [rotation(modes, i) for i in range(2 * len(modes) + 1)]
    assert all(sorted(order) == sorted(modes) for order in orders)
    sequence = [mode for order in orders for mode in order]
    assert all(a != b for a, b in itertools.pairwise(sequence))
    assert {order[0] for order in orders} == set(modes)  # every one goes first


def rounds(on_s: float) -> dict[str, list[float]]:
    """Three rounds whose machine speed drifts; each contestant's own added time fixed."""
    direct = [0.010, 0.020, 0.012]
    return {
        "direct": direct,
        "direct_replay": [d + 0.005 for d in direct],  # the replaying body: 5 ms upstream
        "floor": [d + 0.001 for d in direct],  # the bare hop: 1 ms
        "relay": [0.012, 0.023, 0.014],  # added 2, 3, 2: median 2
        "relay_cache": [d + 0.005 + on_s for d in direct],  # net of the replaying body: on_s
        "litellm": [d + 0.050 for d in direct],  # added 50 ms each round
    }


def test_the_contestants_row_nets_out_the_replaying_body_and_the_hop() -> None:
    row = summarize("201", rounds(0.004), 97, [0.5, 0.75])
    assert row["added_s"]["floor"] == pytest.approx(0.001)
    assert row["added_s"]["relay_cache"] == pytest.approx(0.009)
    assert row["relay_cache_net_s"] == pytest.approx(0.004)
    assert row["above_floor_s"]["relay"] == pytest.approx(0.001)  # 1, 2, 1 above the hop
    assert row["above_floor_s"]["relay_cache"] == pytest.approx(0.003)  # net 4, less the hop
    assert row["added_s"]["litellm"] == pytest.approx(0.050)
    assert row["ratio"]["relay"] == pytest.approx(0.04)
    assert row["ratio"]["relay_cache"] == pytest.approx(0.009 / 0.050)


@pytest.mark.parametrize(
    ("on_s", "verdict"), [(-0.0001, "≤ 0.1x: met"), (0.0001, "≤ 0.1x: MISSED")]
)
def test_the_litellm_verdict_is_the_relays_added_time_over_litellms(
    on_s: float, verdict: str
) -> None:
    # Added, cache on = 5 ms (replaying body) + on_s: 0.1x of LiteLLM's 50 ms is the edge.
    row = summarize("201", rounds(on_s), 97, [0.5, 0.75])
    lines = contestants_report({"rows": [row], "iterations": 3, "target_ratio": 0.1})
    assert "LiteLLM" in lines[0]
    line = next(line for line in lines[1].splitlines() if line.startswith("| 201"))
    assert verdict in line and "| 97 |" in line and "0.50 → 0.75" in line


def test_without_litellm_the_contestants_report_has_no_ratio_columns() -> None:
    times = {mode: values for mode, values in rounds(0.004).items() if mode != "litellm"}
    row = summarize("small", times, 0, [0.5, 0.5])
    assert "ratio" not in row
    lines = contestants_report({"rows": [row], "iterations": 3, "target_ratio": 0.1})
    assert "LiteLLM" not in "\n".join(lines[:2])
    line = next(line for line in lines[1].splitlines() if line.startswith("| small"))
    # direct 12 ms; the hop 1; off 2, on 9 (net 4); above the hop: off 1, on 3
    assert line.startswith(
        "| small | 3 | 0 | 12.000 | 1.000 | 2.000 | 9.000 | 4.000 | 1.000 | 3.000 |"
    )
