"""The relay's own counters (relay.ops.metrics), read back with prometheus_client's parser."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from relay.http.routes import ROUTES
from relay.ops.metrics import RelayMetrics, route_of


def samples(metrics: RelayMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            out[s.name, tuple(sorted(s.labels.items()))] = s.value
    return out


def test_outcomes_by_route() -> None:
    metrics = RelayMetrics()
    metrics.request_finished("/v1/chat/completions", 200, None, 1.0)
    metrics.request_finished("/v1/chat/completions", 200, "upstream_timeout", 2.0)  # mid-stream
    metrics.request_finished("/chat/completions", 413, None, 3.0)
    metrics.request_finished("/v1/responses", 401, "invalid_api_key", 4.0)
    metrics.request_finished("/etc/passwd", 404, "not_found", 5.0)
    got = samples(metrics)

    def requests(route: str, outcome: str) -> float:
        return got["relay_requests_total", (("outcome", outcome), ("route", route))]

    assert requests("chat_completions", "ok") == 1
    assert requests("chat_completions", "upstream_timeout") == 1
    assert requests("chat_completions", "http_413") == 1
    assert requests("responses", "invalid_api_key") == 1
    assert requests("other", "not_found") == 1  # a path never becomes a label
    assert metrics.request_counts()["chat_completions"] == {
        "ok": 1, "upstream_timeout": 1, "http_413": 1,
    }  # fmt: skip
    assert [e["code"] for e in metrics.errors.latest()][:2] == ["not_found", "invalid_api_key"]


def test_an_upstream_code_that_is_not_a_reason_code_is_other() -> None:
    metrics = RelayMetrics()
    metrics.request_finished("/v1/responses", 400, "Some Upstream Text with sk-abc", 1.0)
    got = samples(metrics)
    assert got["relay_requests_total", (("outcome", "other"), ("route", "responses"))] == 1


def test_histograms_count_and_sum() -> None:
    metrics = RelayMetrics()
    metrics.observe_first_byte("/v1/chat/completions", 0.2)
    metrics.observe_first_byte("/v1/chat/completions", 0.4)
    metrics.observe_upstream("openai", 0.03)
    got = samples(metrics)
    route = (("route", "chat_completions"),)
    assert got["relay_time_to_first_byte_seconds_count", route] == 2
    assert abs(got["relay_time_to_first_byte_seconds_sum", route] - 0.6) < 1e-9
    assert got["relay_time_to_first_byte_seconds_bucket", (("le", "0.25"), *route)] == 1
    assert got["relay_upstream_latency_seconds_count", (("provider", "openai"),)] == 1


def test_two_relays_in_one_process_keep_their_own_registries() -> None:
    first, second = RelayMetrics(), RelayMetrics()  # the global registry would refuse this
    first.request_finished("/healthz", 200, None, 1.0)
    assert first.request_counts() == {"healthz": {"ok": 1}}
    assert second.request_counts() == {}


@pytest.mark.parametrize(("path", "label"), [
    ("/v1/models", "models"),
    ("/v1/models/gpt-5", "models"),
    ("/v1/models/deepseek/deepseek-chat", "models"),
    ("/v1/models/", "other"),
    ("/api/cache/reasoning", "cache_api"),
    ("/readyz", "readyz"),
    ("/responses", "responses"),
    ("/v1/chat/completions/x", "other"),
    ("/v1/chat/completionsx", "other"),
])  # fmt: skip
def test_routes(path: str, label: str) -> None:
    assert route_of(path) == label


def test_every_route_of_the_table_has_its_own_label() -> None:
    for route in ROUTES:
        assert route_of(route.path.replace("{id}", "x")) == route.label != "other"


def test_refused_parameters_are_counted_by_a_bounded_name() -> None:
    metrics = RelayMetrics()
    for param in ("previous_response_id", "previous_response_id", "seed", "made_up", None):
        metrics.parameter_refused(param)
    got = samples(metrics)
    counts = {
        labels[0][1]: value
        for (name, labels), value in got.items()
        if name == "relay_refused_params_total"
    }
    assert counts == {"previous_response_id": 2, "seed": 1, "other": 2}


def test_fences_of_the_last_hour_start_from_the_process_start() -> None:
    metrics = RelayMetrics()
    metrics.started(0.0, 1_000.0)
    metrics.fence_history.record(100.0, {"item_type_reasoning": 2})
    assert metrics.fence_history.growth(100.0, {"item_type_reasoning": 2}) == (
        {"item_type_reasoning": 2}, 100.0,
    )  # fmt: skip
    # An hour on, only the fence after the last sample before the window counts.
    totals = {"item_type_reasoning": 3}
    metrics.fence_history.record(4_000.0, totals)
    assert metrics.fence_history.growth(4_000.0, totals) == ({"item_type_reasoning": 1}, 3_900.0)
