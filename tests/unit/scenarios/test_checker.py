"""scenarios.checker on hand-made histories: it passes a correct one and fails each
deliberately wrong (mutated) one. A checker that cannot fail proves nothing."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from scenarios.checker import check_history
from scenarios.history import History
from tests.support.checker_history import (
    answer,
    assistant,
    call,
    reasoning,
    relay_exit,
    relay_start,
    run,
    user,
)


def good_replay(cache: bool = True) -> list[tuple[str, dict[str, Any]]]:
    """Turn 1 mints rs_1 for "Hello!"; turn 2 replays it in exactly that place."""
    return [
        relay_start(cache),
        call(0, [user("hi")], [reasoning("rs_1", "TOKEN-A"), assistant("Hello!")]),
        answer("t1", "Hello!"),
        call(
            1,
            [user("hi"), reasoning("rs_1", "TOKEN-A"), assistant("Hello!"), user("more")],
            [assistant("More.")],
        ),
        answer("t2", "More."),
    ]


def test_correct_replay_passes() -> None:
    report = run(good_replay())
    assert report.ok, report.describe()
    assert report.stats["replayed_items"] == 1
    assert report.stats["wrong_replays"] == 0


def mutate_second_call(events: list[Any], change: Any) -> list[Any]:
    mutated = copy.deepcopy(events)
    change(mutated[3][1]["body"])
    return mutated


@pytest.mark.parametrize(
    ("why", "change"),
    [
        (
            "placed before a different visible message",
            lambda body: body["input"].__setitem__(2, assistant("Hello?")),
        ),
        (
            "after an edited earlier message",
            lambda body: body["input"].__setitem__(0, user("hi (edited)")),
        ),
        ("in another scope (model)", lambda body: body.__setitem__("model", "gpt-5-mini")),
        (
            "a token the fake never minted",
            lambda body: body["input"].__setitem__(1, reasoning("rs_1", "FORGED")),
        ),
        (
            "an id the fake never minted, without ciphertext",
            lambda body: body["input"].__setitem__(1, reasoning("rs_9", None)),
        ),
        ("replayed twice", lambda body: body["input"].insert(3, reasoning("rs_1", "TOKEN-A"))),
    ],
)
def test_wrong_replay_is_caught(why: str, change: Any) -> None:
    report = run(mutate_second_call(good_replay(), change), "no_wrong_replay")
    assert not report.ok, why
    assert report.count("no_wrong_replay") >= 1
    assert report.stats["wrong_replays"] >= 1


def test_reasoning_minted_for_another_conversation_is_caught() -> None:
    events = [
        *good_replay()[:3],
        call(1, [user("other chat")], [reasoning("rs_2", "TOKEN-B"), assistant("Hello!")]),
        # Same visible assistant text, but TOKEN-B was minted after "other chat", not "hi".
        call(
            2,
            [user("hi"), reasoning("rs_2", "TOKEN-B"), assistant("Hello!"), user("more")],
            [assistant("More.")],
        ),
    ]
    report = run(events, "no_wrong_replay")
    assert report.count("no_wrong_replay") == 1


def test_token_from_a_later_call_is_an_impossible_history() -> None:
    events = good_replay()
    events[1], events[3] = events[3], events[1]
    assert run(events, "no_wrong_replay").count("no_wrong_replay") >= 1


@pytest.mark.parametrize("outcome", ["failed", "broken", "error_event", "http_error"])
def test_failed_generation_reported_as_success_is_caught(outcome: str) -> None:
    events = [
        relay_start(False),
        call(0, [user("hi")], [assistant("Hel")], outcome=outcome),
        answer("t1", "Hel"),
    ]
    report = run(events, "no_false_success")
    assert report.count("no_false_success") == 1


def test_failed_generation_reported_as_error_passes() -> None:
    events = [
        relay_start(False),
        call(0, [user("hi")], [assistant("Hel")], outcome="broken"),
        answer(
            "t1",
            "Hel",
            outcome="error",
            finish=None,
            done=False,
            error={"code": "upstream_protocol_error"},
        ),
    ]
    assert run(events).ok


def test_success_with_other_text_than_generated_is_caught() -> None:
    events = [
        relay_start(False),
        call(0, [user("hi")], [assistant("Hello!")]),
        answer("t1", "Hello"),
    ]
    assert run(events, "no_false_success").count("no_false_success") == 1


def test_incomplete_generation_must_say_length() -> None:
    base = [relay_start(False), call(0, [user("hi")], [assistant("Hel")], outcome="incomplete")]
    assert run([*base, answer("t1", "Hel", finish="length")], "no_false_success").ok
    assert not run([*base, answer("t1", "Hel", finish="stop")], "no_false_success").ok


def test_one_generation_backs_one_success_only() -> None:
    events = [
        relay_start(False),
        call(0, [user("hi")], [assistant("Hello!")]),
        answer("t1", "Hello!"),
        answer("t1-again", "Hello!"),
    ]
    assert run(events, "no_false_success").count("no_false_success") == 1


def test_error_frame_with_done_is_caught() -> None:
    events = [relay_start(False), answer("t1", "", outcome="error", done=True, error={"code": "x"})]
    assert run(events, "no_false_success").count("no_false_success") == 1


@pytest.mark.parametrize(
    ("cause", "ok"),
    [("unexpected", False), ("harness_kill", True), ("crash_point", True), ("harness_stop", True)],
)
def test_relay_death(cause: str, ok: bool) -> None:
    report = run([relay_start(False), relay_exit(cause)], "no_crash_on_bad_input")
    assert report.ok is ok


def test_internal_error_is_caught() -> None:
    events = [
        relay_start(False),
        answer(
            "t1",
            "",
            outcome="error",
            done=False,
            error={"message": "internal relay error; the relay log has details"},
        ),
    ]
    assert run(events, "no_internal_error").count("no_internal_error") == 1


def lost_history(cache_between: bool) -> list[Any]:
    events = good_replay(cache=True)
    events[3] = call(1, [user("hi"), assistant("Hello!"), user("more")], [assistant("More.")])
    events.insert(3, relay_exit("harness_kill"))
    events.insert(4, relay_start(cache_between, incarnation=2))
    return events


def test_delivered_block_not_replayed_after_restart_is_lost() -> None:
    report = run(lost_history(cache_between=True), "nothing_lost")
    assert report.count("nothing_lost") == 1


def test_loss_is_allowed_across_a_disabled_relay() -> None:
    assert run(lost_history(cache_between=False), "nothing_lost").ok


def test_contested_position_may_not_replay() -> None:
    events = lost_history(cache_between=True)
    # A regeneration at the same position: the position is ambiguous, no replay owed.
    events.insert(3, call(9, [user("hi")], [reasoning("rs_3", "TOKEN-C"), assistant("Hi!")]))
    assert run(events, "nothing_lost").ok


def test_replayed_block_after_restart_is_not_lost() -> None:
    events = good_replay(cache=True)
    events.insert(3, relay_exit("harness_kill"))
    events.insert(4, relay_start(True, incarnation=2))
    assert run(events).ok


def test_unknown_check_name_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown checks"):
        run(good_replay(), "no_such_check")


def test_history_round_trips_through_jsonl(tmp_path: Any) -> None:
    path = tmp_path / "history.jsonl"
    history = History(path=path)
    for kind, data in good_replay():
        history.record(kind, **data)
    loaded = History.load(path)
    assert [e.kind for e in loaded] == [e.kind for e in history]
    assert check_history(loaded).ok
