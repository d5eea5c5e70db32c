"""The replay-era rules of scenarios.checker on hand-made histories: what a committed
block is owed, what contests it, and the credential as part of a call's scope."""

from __future__ import annotations

from typing import Any

from tests.unit.test_checker import (
    answer,
    assistant,
    call,
    reasoning,
    relay_exit,
    relay_start,
    run,
    user,
)

Events = list[tuple[str, dict[str, Any]]]


def with_credential(event: tuple[str, dict[str, Any]], label: str) -> tuple[str, dict[str, Any]]:
    kind, data = event
    return kind, {**data, "credential": label}


def two_versions(branch_replays: bool) -> Events:
    """A, then a regeneration B with other text (both delivered), then A's branch."""
    hi = user("hi")
    a = [reasoning("rs_a", "TOKEN-A"), assistant("Version A")]
    after = [hi, *(a if branch_replays else a[1:]), user("go on")]
    return [
        relay_start(True),
        call(0, [hi], a),
        answer("A", "Version A"),
        call(1, [hi], [reasoning("rs_b", "TOKEN-B"), assistant("Version B")]),
        answer("B", "Version B"),
        call(2, after, [assistant("Going on.")]),
        answer("on_A", "Going on."),
    ]


def test_a_regeneration_with_other_text_contests_nothing() -> None:
    assert run(two_versions(branch_replays=True)).ok
    report = run(two_versions(branch_replays=False), "nothing_lost")
    assert report.count("nothing_lost") == 1


def test_a_regeneration_with_the_same_text_is_a_conflict() -> None:
    events = two_versions(branch_replays=False)
    events[3] = call(1, [user("hi")], [reasoning("rs_b", "TOKEN-B"), assistant("Version A")])
    events[4] = answer("B", "Version A")
    assert run(events, "nothing_lost").ok


def test_a_refusal_at_the_position_poisons_it() -> None:
    events = two_versions(branch_replays=False)
    refusal = {"type": "refusal", "refusal": "No."}
    events[3] = call(1, [user("hi")], [reasoning("rs_b", "TOKEN-B"), refusal])
    kind, shown = answer("B", "")
    events[4] = (kind, {**shown, "refusal": "No."})  # delivered in full, as a refusal
    assert run(events).ok


def test_an_undelivered_generation_at_the_position_poisons_it() -> None:
    events = two_versions(branch_replays=False)
    del events[4]  # B's answer never reached the client in full
    assert run(events, "nothing_lost").ok


def test_a_contested_ancestor_releases_its_descendants() -> None:
    hi, a1, a2 = user("hi"), assistant("One."), assistant("Two.")
    r1, r2 = reasoning("rs_1", "T1"), reasoning("rs_2", "T2")
    events = [
        relay_start(True),
        call(0, [hi], [r1, a1]),
        answer("t1", "One."),
        call(1, [hi, r1, a1, user("more")], [r2, a2]),
        answer("t2", "Two."),
        call(2, [hi], [reasoning("rs_x", "TX"), assistant("One.")], outcome="failed"),
        # t2 was generated on top of t1's block, whose position a failure then poisoned.
        call(3, [hi, a1, user("more"), a2, user("again")], [assistant("Three.")]),
        answer("t3", "Three."),
    ]
    assert run(events, "nothing_lost").ok
    del events[5]  # without the failure, t2's block was owed to call 3
    assert run(events, "nothing_lost").count("nothing_lost") == 1


def test_the_credential_is_part_of_the_scope() -> None:
    events = two_versions(branch_replays=True)
    events[5] = with_credential(events[5], "key1")  # the branch, sent under another key
    report = run(events)
    assert report.stats["wrong_replays"] == 1
    assert "in another scope" in report.describe()
    events[5] = with_credential(call(2, [user("hi"), assistant("Version A")], []), "key1")
    assert run(events, "nothing_lost").ok  # nothing is owed across credentials


def test_owed_stats_count_restarts() -> None:
    events = two_versions(branch_replays=True)
    events[5:5] = [relay_exit("harness_kill"), relay_start(True, incarnation=2)]
    report = run(events)
    assert report.ok, report.describe()
    assert report.stats["owed_replays"] == 1
    assert report.stats["owed_across_restarts"] == 1


def relay_event(name: str, request_id: str) -> tuple[str, dict[str, Any]]:
    return "relay_event", {"event": name, "fields": {"request_id": request_id}, "incarnation": 1}


def unconfirmed(cause: str, confirmed: bool) -> Events:
    """A delivered answer, then the relay dies (``cause``), then the block is not replayed."""
    kind, shown = answer("t1", "Hello!")
    events = [
        relay_start(True),
        call(0, [user("hi")], [reasoning("rs_1", "TOKEN-A"), assistant("Hello!")]),
        (kind, {**shown, "request_id": "req_1"}),
        relay_exit(cause),
        relay_event("chat_request", "req_1"),
        relay_start(True, incarnation=2),
        call(1, [user("hi"), assistant("Hello!"), user("more")], [assistant("More.")]),
        answer("t2", "More."),
    ]
    if confirmed:
        events.insert(5, relay_event("chat_done", "req_1"))
    return events


def test_a_delivery_the_dead_relay_never_confirmed_is_not_committed() -> None:
    assert run(unconfirmed("crash_point", confirmed=False), "nothing_lost").ok
    assert run(unconfirmed("harness_kill", confirmed=False), "nothing_lost").ok
    for cause, confirmed in (("crash_point", True), ("harness_stop", False)):
        report = run(unconfirmed(cause, confirmed), "nothing_lost")
        assert report.count("nothing_lost") == 1, (cause, confirmed)
