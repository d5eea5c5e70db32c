"""The replay-era rules of scenarios.checker on hand-made histories: what a committed
block is owed, what contests it, and the credential as part of a call's scope."""

from __future__ import annotations

from typing import Any

from relay.settings.routing import resolve_model
from relay.translate.request import translate_request
from scenarios.visible import chat_segments, segments
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


# --- positions the relay could not observe: requests it never answered, fences --------------


def request(turn: str, messages: list[dict[str, Any]], **extra: Any) -> tuple[str, dict[str, Any]]:
    body = {"model": "gpt-5", "messages": messages, **extra.pop("body", {})}
    return "client_request", {"turn": turn, "conversation": "main", "body": body, **extra}


def no_head(turn: str) -> tuple[str, dict[str, Any]]:
    """The client got nothing at all: the relay died before it answered."""
    kind, shown = answer(turn, "", outcome="cut", finish=None, done=False)
    return kind, {**shown, "status": None, "frames": 0}


def with_user(event: tuple[str, dict[str, Any]], user_id: str) -> tuple[str, dict[str, Any]]:
    kind, data = event
    return kind, {**data, "body": {**data["body"], "user": user_id}}


HI = [{"role": "user", "content": "hi"}]


def crashed_regeneration(answered: bool) -> Events:
    """t1 delivered; its regeneration reached a relay that died before answering (or,
    ``answered``, that refused it with a 503); then t1's branch, without its block."""
    events = [
        relay_start(True),
        request("t1", HI),
        call(0, [user("hi")], [reasoning("rs_1", "T1"), assistant("Hello!")]),
        answer("t1", "Hello!"),
        request("regen", HI),
        no_head("regen"),
        relay_exit("crash_point"),
        relay_start(True, incarnation=2),
        call(1, [user("hi"), assistant("Hello!"), user("more")], [assistant("More.")]),
        answer("t2", "More."),
    ]
    if answered:
        kind, refused = answer("regen", "", outcome="error", finish=None, done=False, error={})
        events[5] = (kind, {**refused, "status": 503})
    return events


def test_a_request_the_relay_never_answered_contests_its_position() -> None:
    assert run(crashed_regeneration(answered=False)).ok  # no upstream call, yet in doubt
    report = run(crashed_regeneration(answered=True), "nothing_lost")
    assert report.count("nothing_lost") == 1  # a 503 is an answer: nothing was generated


def test_chat_segments_match_the_relays_translation() -> None:
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": "Let me look.", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c1", "content": "43"},
        {"role": "assistant", "content": "Done."},
        {"role": "developer", "content": "later rule"},
        {"role": "user", "content": "more"},
    ]
    body = {"model": "gpt-5", "messages": messages}
    translated = translate_request(body, resolve_model("gpt-5", {}), reasoning_summaries=False)
    assert chat_segments(messages) == segments(translated.upstream_body["input"])


def direct(fence_user: str | None, model: str = "gpt-5") -> tuple[str, dict[str, Any]]:
    """A direct Responses request through the relay (which fences before forwarding)."""
    body: dict[str, Any] = {"model": model, "input": "x"}
    if fence_user is not None:
        body["user"] = fence_user
    return "client_request", {"turn": "d", "body": body, "endpoint": "responses"}


def fenced(fence_user: str | None, model: str = "gpt-5") -> Events:
    """alice's t1 delivered; a direct Responses request; then t1's branch, no block."""
    hi = user("hi")
    return [
        relay_start(True),
        request("t1", HI, body={"user": "alice"}),
        with_user(call(0, [hi], [reasoning("rs_1", "T1"), assistant("Hello!")]), "alice"),
        answer("t1", "Hello!"),
        direct(fence_user, model),
        with_user(call(1, [hi, assistant("Hello!"), user("more")], [assistant("M.")]), "alice"),
        answer("t2", "M."),
    ]


def test_a_direct_responses_request_fences_its_model_and_caller() -> None:
    for fence_user in (None, "alice"):
        assert run(fenced(fence_user), "nothing_lost").ok, fence_user
    for events in (fenced("bob"), fenced(None, model="o3")):  # other caller, other model
        assert run(events, "nothing_lost").count("nothing_lost") == 1


def in_flight(fence_first: bool) -> Events:
    """A fence lands while alice's t1 streams (or before t1 was asked); then t1b, a
    regeneration with other text, is delivered; then t1b's branch, without its block."""
    hi = user("hi")
    events = [
        relay_start(True),
        request("t1", HI, body={"user": "alice"}),
        direct("alice"),
        with_user(call(0, [hi], [reasoning("rs_1", "T1"), assistant("Hello!")]), "alice"),
        answer("t1", "Hello!"),
        request("t1b", HI, body={"user": "alice"}),
        with_user(call(1, [hi], [reasoning("rs_2", "T2"), assistant("Other.")]), "alice"),
        answer("t1b", "Other."),
        with_user(call(2, [hi, assistant("Other."), user("more")], [assistant("M.")]), "alice"),
        answer("t2", "M."),
    ]
    if fence_first:
        events[1], events[2] = events[2], events[1]
    return events


def test_a_fence_poisons_a_generation_in_flight() -> None:
    assert run(in_flight(fence_first=False), "nothing_lost").ok  # t1b's position is poisoned
    report = run(in_flight(fence_first=True), "nothing_lost")
    assert report.count("nothing_lost") == 1  # nothing was in flight: t1b is owed


def test_a_passthrough_success_needs_a_completed_generation_and_is_owed_nothing() -> None:
    kind, shown = answer("d", "Hi!", finish=None, done=False)
    direct = (kind, {**shown, "endpoint": "responses"})
    ok = [relay_start(True), call(0, [user("x")], [reasoning("rs", "T"), assistant("Hi!")]), direct]
    ok.append(call(1, [user("x"), assistant("Hi!"), user("more")], [assistant("M.")]))
    assert run(ok).ok  # backed, and not a committed chat block (no replay owed)
    ok[1] = call(0, [user("x")], [assistant("Hi!")], outcome="failed")
    assert run(ok, "no_false_success").count("no_false_success") == 1
