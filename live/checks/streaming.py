"""Streams cut short: a cancellation, the output-token limit, the cache's capacity."""

from __future__ import annotations

from live.checks import check
from live.client import Message
from live.context import CheckContext, continuity, expect_intact
from live.conversation import expect_word, user
from live.fake_replies import say, slow, truncated
from live.verdict import Verdict, expect, passed

COUNT_TO = 120
NUMBERS = " ".join(str(n) for n in range(1, COUNT_TO + 1))


@check("cancellation_next_turn", "a stream cancelled mid-way, then the next turns")
def cancellation_next_turn(ctx: CheckContext) -> Verdict:
    relay = ctx.relay()
    chat = ctx.client(relay)
    messages: list[Message] = [user("Reply with exactly the word: first")]
    first = chat.chat("turn1", messages, script=say("first"))
    messages += [first.message(), user(f"Count from 1 to {COUNT_TO}, separated by spaces.")]
    held = chat.hold("cancelled", messages, script=slow(NUMBERS, deltas=COUNT_TO, latency_ms=20))
    cancelled = held.cancel()
    ctx.wait_event(relay, "client_disconnected", cancelled.request_id)
    ctx.wait_event(relay, "cache_poisoned", cancelled.request_id)
    # The user asks again: the same history. turn1's block still replays ...
    retry = chat.chat("retry", messages, stream=True, script=say(NUMBERS))
    kept = ctx.expect_replay(relay, retry)
    expect(retry.finish_reason == "stop", f"retry: finish={retry.finish_reason}")
    # ... but the retried answer sits where unseen output was generated: never replayed.
    messages += [retry.message(), user("Reply with exactly the word: done")]
    after = chat.chat("follow-up", messages, script=say("done"))
    plan = ctx.plan(relay, after)
    expect(
        plan.replayed == 1 and "start_poisoned" in plan.rejected,
        f"follow-up: expected turn1's block only and start_poisoned, got replayed={plan.replayed} "
        f"rejected={list(plan.rejected)}",
    )
    expect(not ctx.rejections(relay, after), "follow-up: the upstream refused the replay")
    if ctx.offline:
        calls = ctx.calls()
        expect(
            calls[1].get("ended") == "client_gone", f"cancelled call ended {calls[1].get('ended')}"
        )
        expect_intact(calls[2], "retry")
        expect_intact(calls[3], "follow-up")
        expect(continuity(calls[3]).get("replayed") == 1, "follow-up: more than turn1's block sent")
    return passed(
        f"cancelled after {cancelled.chunks} chunk(s); the retry replayed {kept}, the follow-up "
        "replayed turn1's block only (start_poisoned)"
    )


@check("length_finish", "max_output_tokens exhaustion reports finish_reason length")
def length_finish(ctx: CheckContext) -> Verdict:
    relay = ctx.relay()
    chat = ctx.client(relay)
    essay = [user("Write a 400-word essay about rivers.")]
    json_turn = chat.chat("json", essay, max_completion_tokens=16, script=truncated())
    sse_turn = chat.chat("sse", essay, max_completion_tokens=16, stream=True, script=truncated())
    for turn in (json_turn, sse_turn):
        expect(turn.finish_reason == "length", f"{turn.label}: finish={turn.finish_reason}")
    return passed("JSON and SSE both finished with 'length' at 16 output tokens")


@check("capacity_fallback", "beyond REASONING_CACHE_MAX_CONCURRENT a request is served uncached")
def capacity_fallback(ctx: CheckContext) -> Verdict:
    relay = ctx.relay(env={"REASONING_CACHE_MAX_CONCURRENT": "1"})
    chat = ctx.client(relay)
    counting = [user(f"Count from 1 to {COUNT_TO}, separated by spaces.")]
    held = chat.hold("held", counting, script=slow(NUMBERS, deltas=COUNT_TO, latency_ms=25))
    second = chat.chat("second", [user("Reply with exactly the word: pong")], script=say("pong"))
    expect_word(second, "pong")
    skipped = [
        f.get("reason") for e, f in relay.events_for(second.request_id) if e == "cache_skipped"
    ]
    planned = [e for e, _ in relay.events_for(second.request_id) if e == "cache_plan"]
    expect(
        skipped == ["capacity_bypass"] and not planned,
        f"second: expected cache_skipped capacity_bypass, got skips {skipped}, plans {len(planned)}",
    )
    finished = held.finish()
    expect(finished.ok and finished.finish_reason == "stop", f"held: {finished.describe()}")
    ctx.plan(relay, finished)  # the held stream itself was cached
    if ctx.offline:
        body = ctx.calls()[1].get("body") or {}
        expect("include" not in body and "store" not in body, "second: sent as a cached request")
    return passed("with one cache session held, a second request got 200, uncached")
