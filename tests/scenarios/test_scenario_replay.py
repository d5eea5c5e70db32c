"""The history checks bind on real cache-enabled runs: a replay scenario passes, and the
same history with one replay removed or forged fails the right check. A check that cannot
fail on a real history proves nothing."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from scenarios.checker import check_history
from scenarios.dsl import Scenario
from scenarios.library import REGISTRY, load_all
from scenarios.library.lifecycle import crash_lifecycle_at
from scenarios.play import PlayResult, play
from scenarios.requirements import missing
from scenarios.seed import Seed
from tests.support.history_files import load_mutated, recorded_events

pytestmark = pytest.mark.scenario

load_all()


class Kept(Protocol):
    """The ``kept`` fixture: play ``name`` (or ``scenario``, a part of it) keeping its run."""

    def __call__(self, name: str, seed: Seed, scenario: Scenario | None = None) -> PlayResult: ...


@pytest.fixture
def kept() -> Iterator[Kept]:
    """Play a library scenario keeping its run directory; removed afterwards. A scenario
    whose requirements this machine lacks skips the test, as in the library tests."""
    dirs: list[Path] = []

    def run(name: str, seed: Seed, scenario: Scenario | None = None) -> PlayResult:
        """``scenario``: a part of ``name`` built by the test (``name``'s needs apply)."""
        if (reason := missing(REGISTRY[name].needs)) is not None:
            pytest.skip(reason)
        result = play(scenario or REGISTRY[name].build(seed), seed, keep=True)
        dirs.append(result.run_dir)
        return result

    yield run
    for path in dirs:
        shutil.rmtree(path, ignore_errors=True)


def _calls_after_restart(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Upstream calls made by the second relay incarnation (after the first restart)."""
    starts = [e["seq"] for e in events if e["kind"] == "process_start" and e["role"] == "relay"]
    return [e for e in events if e["kind"] == "upstream_exchange" and e["seq"] > starts[1]]


def test_nothing_lost_binds_across_restarts(kept: Kept, seed: Seed) -> None:
    result = kept("replay_survives_restarts", seed)
    assert result.report.ok
    assert result.report.stats["owed_across_restarts"] == 2  # one kill -9, one graceful

    events = recorded_events(result)
    first = _calls_after_restart(events)[0]
    first["body"]["input"] = [i for i in first["body"]["input"] if i.get("type") != "reasoning"]
    report = check_history(load_mutated(result, events))
    assert report.count("nothing_lost") == 1, report.describe()
    assert "across 1 relay restart" in report.describe()

    # The same loss is allowed when the restarted relay had the cache off.
    for event in events:
        if event["kind"] == "process_start" and event.get("incarnation") == 2:
            event["cache_enabled"] = False
    assert check_history(load_mutated(result, events), ("nothing_lost",)).ok


def test_a_replay_under_another_credential_is_a_wrong_replay(kept: Kept, seed: Seed) -> None:
    result = kept("replay_isolated_by_credential", seed)
    assert result.report.ok
    events = recorded_events(result)
    calls = [e for e in events if e["kind"] == "upstream_exchange"]
    minted, replayed = calls[0], calls[1]  # t1, and t2 replaying t1 (both key0)
    other_key = _calls_after_restart(events)[0]
    assert (minted["credential"], other_key["credential"]) == ("key0", "key1")
    # Forge what a relay leaking blocks across credentials would send: t2's input (t1's
    # block in place) under key1, for the very same visible history.
    other_key["body"]["input"] = replayed["body"]["input"]
    report = check_history(load_mutated(result, events))
    assert report.stats["wrong_replays"] == 1, report.describe()
    assert "in another scope" in report.describe()


def test_every_replay_scenario_owes_and_pays(kept: Kept, seed: Seed) -> None:
    """Where blocks are committed and then carried forward, the check did bind."""
    for name in ("replay_multi_turn_mixed_modes", "replay_regenerated_versions_on_their_branches"):
        result = kept(name, seed)
        assert result.report.ok
        assert result.report.stats["owed_replays"] >= 2, (name, result.report.stats)


def test_an_unconfirmed_delivery_explains_the_loss(kept: Kept, seed: Seed) -> None:
    result = kept("replay_lost_only_with_an_unconfirmed_delivery", seed)
    assert result.report.ok
    events = recorded_events(result)
    t2 = next(e for e in events if e["kind"] == "client_answer" and e["turn"] == "t2")
    assert t2["request_id"]
    # Had the crashed relay confirmed t2's delivery, t3 would have owed it a replay.
    events.append(
        {"seq": len(events), "t": 0.0, "kind": "relay_event", "event": "chat_done",
         "fields": {"request_id": t2["request_id"]}, "incarnation": 2}
    )  # fmt: skip
    report = check_history(load_mutated(result, events), ("nothing_lost",))
    assert report.count("nothing_lost") == 1, report.describe()


def test_a_request_the_relay_never_answered_explains_the_loss(kept: Kept, seed: Seed) -> None:
    """crash_lifecycle_at_every_point: a crash at before_upstream_send leaves an intent
    but no upstream call; only the client's unanswered request explains why the admitted
    answer there no longer replays. Pretend the relay had answered: two losses (SSE, JSON),
    and none at after_upstream_headers, where the upstream call explains it.

    Only those two points' cases are played: test_scenario_library plays the whole
    scenario (eleven cases, about 30 s) and checks its run passes; what this test adds is
    the mutation, and only these cases bear on it (before them nothing was owed, after
    them an upstream call explains every loss, as at after_upstream_headers)."""
    points = ("before_upstream_send", "after_upstream_headers")
    part = crash_lifecycle_at(seed, points, "crash_lifecycle_at_send_points")
    result = kept("crash_lifecycle_at_every_point", seed, part)
    assert result.report.ok
    events = recorded_events(result)
    for event in events:
        if event["kind"] == "client_answer" and event["status"] is None:
            event["status"] = 200
    report = check_history(load_mutated(result, events), ("nothing_lost",))
    assert report.count("nothing_lost") == 2, report.describe()


def test_a_fence_explains_the_loss_only_for_its_caller(kept: Kept, seed: Seed) -> None:
    for name in ("direct_responses_fence_their_scope", "fence_poisons_a_generation_in_flight"):
        result = kept(name, seed)
        assert result.report.ok and result.report.stats["owed_replays"] >= 1
        events = recorded_events(result)
        for event in events:  # the same direct requests, for a caller nobody else is
            if event["kind"] == "client_request" and event.get("endpoint") == "responses":
                event["body"]["user"] = "somebody-else"
        report = check_history(load_mutated(result, events), ("nothing_lost",))
        assert report.count("nothing_lost") >= 2, (name, report.describe())


@pytest.mark.parametrize(
    "name", ["replay_rejected_after_key_rotation", "replay_rejected_without_resend"]
)
def test_a_rejected_replay_is_recovered_with_no_wrong_replay(
    kept: Kept, seed: Seed, name: str
) -> None:
    """The rejection scenarios' figures: model calls, refusals, resends, wrong replays."""
    result = kept(name, seed)
    assert result.report.ok, result.report.describe()
    events = recorded_events(result)
    calls = [e for e in events if e["kind"] == "upstream_exchange"]
    refused = [c for c in calls if c.get("status") == 400]
    resent = sum(
        1
        for e in events
        if e["kind"] == "relay_event"
        and e["event"] == "replay_rejected"
        and e["fields"].get("resend") == "True"
    )
    answers = [e for e in events if e["kind"] == "client_answer"]
    print(
        f"{name}: client turns={len(answers)} upstream calls={len(calls)} "
        f"refused={len(refused)} resends={resent} "
        f"wrong_replays={result.report.stats['wrong_replays']} "
        f"relay_starts={result.report.stats['relay_starts']}"
    )
    assert len(refused) == 1  # offered once, never again
    assert resent == (1 if name == "replay_rejected_after_key_rotation" else 0)
    assert result.report.stats["wrong_replays"] == 0
