"""Isolation: the same visible history under another model, effort, caller, or edited,
must not replay; the unchanged follow-up (the control) must."""

from __future__ import annotations

from typing import Any

from live.checks import check
from live.client import Message
from live.context import CheckContext, continuity
from live.conversation import user
from live.fake_replies import say
from live.verdict import Verdict, expect, passed

ALICE, BOB = "live-check-alice", "live-check-bob"


@check("isolation", "another model, effort, caller or an edited history gets no replay")
def isolation(ctx: CheckContext) -> Verdict:
    relay = ctx.relay()
    chat = ctx.client(relay)
    opening = user("Think of a fruit. Reply with its name only, in lower case.")
    first = chat.chat("base", [opening], user=ALICE, script=say("mango"))
    question = user("Is it usually sweet? Answer yes or no.")
    follow: list[Message] = [opening, first.message(), question]
    control = chat.chat("control", follow, user=ALICE, script=say("yes"))
    replayed = ctx.expect_replay(relay, control)
    edited = [user("Think of a vegetable. Reply with its name only, in lower case."),
              first.message(), question]  # fmt: skip
    variants: list[tuple[str, list[Message], dict[str, Any]]] = [
        (
            f"model {ctx.settings.alt_model}",
            follow,
            {"model": ctx.settings.alt_model, "user": ALICE},
        ),
        ("effort medium", follow, {"reasoning_effort": "medium", "user": ALICE}),
        ("another user", follow, {"user": BOB}),
        ("edited history", edited, {"user": ALICE}),
    ]
    for label, messages, params in variants:
        turn = chat.chat(label, messages, script=say("yes"), **params)
        ctx.expect_no_replay(relay, turn)
        if ctx.offline:
            sent = continuity(ctx.calls()[-1]).get("replayed")
            expect(sent == 0, f"{label}: the upstream received {sent} replayed block(s)")
    names = ", ".join(label for label, _, _ in variants)
    return passed(f"control replayed {replayed}; no replay for {names}")


@check("ambiguous_regeneration", "one prompt answered twice with the same text: no replay")
def ambiguous_regeneration(ctx: CheckContext) -> Verdict:
    relay = ctx.relay()
    chat = ctx.client(relay)
    prompt = [user("Reply with exactly the lowercase word: ok")]
    answer = chat.chat("answer", prompt, script=say("ok"))
    again = chat.chat("regeneration", prompt, script=say("ok"))
    expect(
        answer.text == again.text,
        f"the two answers differ ({answer.text!r} vs {again.text!r}): nothing ambiguous to test",
    )
    follow = [*prompt, answer.message(), user("Reply with exactly the lowercase word: done")]
    turn = chat.chat("follow-up", follow, script=say("done"))
    plan = ctx.expect_no_replay(relay, turn)
    expect(plan is not None, "follow-up: the cache did not plan the request at all")
    assert plan is not None
    expect(
        "end_conflict" in plan.rejected,
        f"follow-up: expected the end_conflict rejection, got {list(plan.rejected)}",
    )
    if ctx.offline:
        sent = continuity(ctx.calls()[-1]).get("replayed")
        expect(sent == 0, f"follow-up: the upstream received {sent} replayed block(s)")
    return passed(f"two identical answers {answer.text!r}; the follow-up replayed 0 (end_conflict)")
