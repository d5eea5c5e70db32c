"""The crash-safe lifecycle of a cached generation (design §1, §4-§8): dispatch intent,
observation committed before the terminal frame, intent resolved after delivery; what
startup recovery, coverage gaps, fencing and capacity bypass do with the positions a
relay could not observe. Every scenario runs with the cache on, and after every kill the
store file passes ``PRAGMA integrity_check`` while no relay owns it.

The common pattern: an answer ``t1`` is admitted; ``t1`` is regenerated (same visible
text) under a fault; later a follow-up whose history holds ``t1``'s original answer
shows whether ``t1``'s block still replays. Once a generation at that position may have
happened unobserved, it must not.
"""

from __future__ import annotations

from dataclasses import replace

from scenarios.dsl import (
    AtLeast,
    AwaitCrash,
    Branch,
    Chat,
    ClientGot,
    Concurrently,
    DirectResponses,
    Holds,
    KillRelay,
    Matches,
    Regenerate,
    RelayReported,
    ReplayOf,
    RestartRelay,
    Resume,
    Scenario,
    StoreIntegrity,
    Upstream,
    UpstreamReceived,
    reply,
)
from scenarios.faults.crash import arm, every_point
from scenarios.library import scenario
from scenarios.library.replay import CACHE, chain, echo, intact
from scenarios.seed import Seed

# Crash points before the dispatch intent exists: nothing was generated yet.
NO_INTENT_YET = ("before_dispatch_intent",)
SSE_ONLY = ("after_done_frame",)  # a JSON answer has no [DONE]
# (point, streamed) pairs after which the client already holds the whole answer.
CLIENT_HAS_IT = (("after_done_frame", True), ("after_terminal_frame", False))
LONG = "a long and winding answer " * 24
DELTAS = 48


def lifecycle_cases(seed: Seed, points: tuple[str, ...] | None = None) -> list[tuple[str, bool]]:
    """Every (crash point, streamed) pair the chat path reaches (at ``points`` only, when
    given), in a seeded order."""
    chosen = every_point() if points is None else points
    cases = [(p, m) for p in chosen for m in (True, False) if m or p not in SSE_ONLY]
    seed.stream("case_order").shuffle(cases)
    return cases


def no_cache_fields(turn: str) -> Holds:
    """The turn went upstream as the ordinary translation: no store/include added."""
    return Holds(
        f"{turn} went upstream uncached (no store/include added)",
        lambda ctx: not {"store", "include"} & set(ctx.upstream_of(ctx.turn(turn))[0]["body"]),
    )


@scenario(needs=("crash_points",))
def crash_lifecycle_at_every_point(seed: Seed) -> Scenario:
    """kill -9 at every lifecycle crash point (streamed and JSON) while regenerating an
    admitted answer, a restart after each: integrity_check is ok after every kill; from
    the dispatch intent on, the crashed regeneration makes the position ambiguous, so the
    original block never replays again (recovery poisons it); before the intent nothing
    was generated and it still replays. The client never sees a success it did not get."""
    return crash_lifecycle_at(seed, every_point(), "crash_lifecycle_at_every_point")


def crash_lifecycle_at(seed: Seed, points: tuple[str, ...], name: str) -> Scenario:
    """:func:`crash_lifecycle_at_every_point` at ``points`` only (a test that needs a
    few of its cases plays those, not all eleven)."""
    cases = {f"{point}/{sse}": (point, sse) for point, sse in lifecycle_cases(seed, points)}
    s = Scenario(name, relay=CACHE)
    for case in cases:
        sse_t1 = seed.choice(case, ["sse", "json"]) == "sse"
        s >> Chat(f"q {case}", conv=case, name=f"t1@{case}", stream=sse_t1)
    if seed.choice("first_stop", ["kill", "term"]) == "kill":
        s >> KillRelay()  # else the first restart below stops it gracefully
        s << StoreIntegrity(intents=0)
    for case, (point, sse) in cases.items():
        s >> RestartRelay(crash_at=arm(point))  # a graceful stop, or a start after a kill
        s >> Regenerate(conv=case, name=f"regen@{case}", stream=sse)
        s >> AwaitCrash()
        if (point, sse) in CLIENT_HAS_IT:
            s << ClientGot(outcome="success", text=echo(f"q {case}", 0))
        else:
            s << ClientGot(outcome=Matches("^(cut|error)$"), done=False)
        s << StoreIntegrity(intents=0 if point in NO_INTENT_YET else 1)
    s >> RestartRelay(crash_at=None)
    for case, (point, _) in cases.items():
        s >> Branch(f"t1@{case}")
        s >> Chat("and then?", conv=case, name=f"next@{case}")
        if point in NO_INTENT_YET:
            s << UpstreamReceived(replayed=chain(f"t1@{case}"), continuity=intact(1))
        else:
            s << UpstreamReceived(replayed=[], continuity=intact(0))
    poisoned = sum(1 for point, _ in cases.values() if point not in NO_INTENT_YET)
    s << RelayReported("cache_opened", count=poisoned, fields={"recovered_intents": "1"})
    s << RelayReported("cache_plan", count=poisoned, fields={"rejected": Matches("poisoned")})
    return s


@scenario()
def kill_during_delivery_poisons_the_position(seed: Seed) -> Scenario:
    """kill -9 from outside once a slow reader holds N frames of a long regenerated
    answer: the client sees a cut; the store is intact and keeps the intent; after the
    restart neither the original answer nor the cut one replays there, while the block
    before them still does."""
    frames = seed.randint("kill_after_frames", 2, DELTAS - 8)  # >= 8 events (160 ms) left
    long = reply(LONG, reasoning=["r"], deltas=DELTAS, latency_ms=20)
    s = Scenario("kill_during_delivery_poisons_the_position", relay=CACHE)
    s >> Chat("first", name="t0", stream=seed.choice("mode", ["sse", "json"]) == "sse")
    s >> Upstream(long, long)
    s >> Chat("tell me a long story", name="t1")
    s >> Branch("t0")  # the same request again: a regeneration, read slowly
    s >> Chat("tell me a long story", name="regen", hold=frames, rcvbuf=2048)
    s >> KillRelay()
    s >> Resume("regen")
    s << ClientGot("regen", outcome="cut", done=False, frames=AtLeast(frames))
    s << StoreIntegrity(intents=1)
    s >> RestartRelay()
    s << RelayReported("cache_opened", fields={"recovered_intents": "1"})
    for kept in ("t1", "regen"):  # the original answer, then the partial text
        s >> Branch(kept)
        s >> Chat("and then?", name=f"after_{kept}")
        s << UpstreamReceived(replayed=chain("t0"), continuity=intact(1))
        s << ClientGot(text=echo("and then?", 1))
    return s


@scenario()
def graceful_stop_mid_generation_poisons_the_position(seed: Seed) -> Scenario:
    """A graceful stop (SIGTERM) while a regeneration streams: shutdown aborts the live
    session and poisons its position before closing the store, so no intent is left for
    recovery, and neither the original answer nor the cut one replays there after."""
    frames = seed.randint("stop_after_frames", 1, DELTAS - 8)
    long = reply(LONG, reasoning=["r"], deltas=DELTAS, latency_ms=20)
    s = Scenario("graceful_stop_mid_generation_poisons_the_position", relay=CACHE)
    s >> Chat("first", name="t0")
    s >> Upstream(long, long)
    sse = seed.choice("mode", ["sse", "json"]) == "sse"
    s >> Chat("tell me a long story", name="t1", stream=sse)
    s >> Branch("t0")
    s >> Chat("tell me a long story", name="regen", hold=frames)
    s >> RestartRelay()  # graceful: SIGTERM, the held stream still open
    s >> Resume("regen")
    s << ClientGot("regen", outcome=Matches("^(cut|error)$"), done=False)
    s << RelayReported("cache_poisoned", count=1, fields={"reason": "shutdown"})
    s << RelayReported("cache_opened", count=2, fields={"recovered_intents": "0"})
    for kept in ("t1", "regen"):
        s >> Branch(kept)
        s >> Chat("and then?", name=f"after_{kept}")
        s << UpstreamReceived(replayed=chain("t0"), continuity=intact(1))
    s >> KillRelay()
    s << StoreIntegrity(intents=0)
    return s


@scenario()
def coverage_gap_retires_every_older_block(seed: Seed) -> Scenario:
    """enabled → disabled with traffic → enabled: every block recorded before the gap
    stops replaying for good, where the gap's traffic went and where it did not, across
    a later enabled restart too; blocks admitted after the gap replay, and an enabled →
    enabled restart (kill -9) keeps them."""
    convs = {"touched": "hello", "untouched": "hi there"}
    s = Scenario("coverage_gap_retires_every_older_block", relay=CACHE)
    for conv, text in convs.items():
        s >> Chat(text, conv=conv, name=f"{conv}1")
    s >> RestartRelay(cache=False, kill=seed.choice("kill_enabled", ["yes", "no"]) == "yes")
    s >> Regenerate(conv="touched", name="unobserved")  # the gap's traffic
    s << ClientGot(text=echo("hello", 0))  # t1's very text, other reasoning
    s >> KillRelay()
    s << StoreIntegrity(intents=0)
    s >> RestartRelay(cache=True)
    s << RelayReported("cache_opened", fields={"gap_consumed": "True"})
    for conv in convs:
        s >> Branch(f"{conv}1")
        s >> Chat("more", conv=conv, name=f"{conv}2")
        s << UpstreamReceived(replayed=[], continuity=intact(0))
    s >> KillRelay()
    s << StoreIntegrity(intents=0)
    s >> RestartRelay()  # enabled → enabled: nothing is retired
    s << RelayReported("cache_opened", count=1, fields={"gap_consumed": "True"})
    for conv in convs:
        s >> Chat("again", conv=conv, name=f"{conv}3")
        s << UpstreamReceived(replayed=[ReplayOf(f"{conv}2", at=3)], continuity=intact(1))
    s << RelayReported("cache_plan", fields={"rejected": Matches("stale_generation")})
    return s


@scenario()
def direct_responses_fence_their_scope(seed: Seed) -> Scenario:
    """Direct POST /v1/responses traffic is unobservable, so the relay fences first: with
    a ``user`` only that caller's conversations stop replaying, without one every
    conversation of that credential and model does; another model's traffic fences none.
    Each passthrough answer is the upstream's own Responses stream or object."""
    alice = f"alice-{seed.randint('alice', 1, 999)}"
    callers = {"alice": {"user": alice}, "bob": {"user": "bob"}}
    s = Scenario("direct_responses_fence_their_scope", relay=CACHE)
    for conv, extra in callers.items():
        s >> Chat("hello", conv=conv, name=f"{conv}1", extra=extra)
    fences = [("o3", None, "0", callers), ("gpt-5", alice, "1", ["bob"]), ("gpt-5", None, "2", [])]
    for k, (model, user, scopes, replaying) in enumerate(fences):
        stream = seed.choice(f"stream@{k}", ["sse", "json"]) == "sse"
        s >> DirectResponses(f"direct {k}", user=user, model=model, stream=stream, name=f"d{k}")
        s << ClientGot(outcome="success", text=echo(f"direct {k}", 0))
        s << RelayReported("cache_fenced", count=1, fields={"scopes": scopes})
        for conv, extra in callers.items():
            s >> Chat(f"more {k}", conv=conv, name=f"{conv}@{k}", extra=extra)
            earlier = [f"{conv}1", *(f"{conv}@{i}" for i in range(k))] if conv in replaying else []
            s << UpstreamReceived(replayed=chain(*earlier), continuity=intact(len(earlier)))
    for conv, extra in callers.items():  # blocks admitted after the last fence replay
        s >> Chat("last", conv=conv, name=f"{conv}_last", extra=extra)
        s << UpstreamReceived(replayed=[ReplayOf(f"{conv}@2", at=7)], continuity=intact(1))
    return s


@scenario()
def capacity_overflow_is_served_uncached_and_poisoned(seed: Seed) -> Scenario:
    """More concurrent cached requests than REASONING_CACHE_MAX_CONCURRENT: every call is
    served; the overflow (same-text regenerations of admitted answers) goes upstream
    uncached and unobserved, so its position is poisoned and the old block there never
    replays, while the held conversations and unrelated histories keep replaying."""
    limit, over = seed.randint("max_concurrent", 1, 3), seed.randint("overflow", 1, 2)
    slow = reply(LONG, reasoning=["r"], deltas=30, latency_ms=40)
    s = Scenario("capacity_overflow_is_served_uncached_and_poisoned",
                 relay=replace(CACHE, cache_max_concurrent=limit))  # fmt: skip
    for k in range(over):
        s >> Chat(f"overflow {k}", conv=f"o{k}", name=f"o{k}")
    s >> Chat("unrelated", conv="u", name="u1")
    s >> Upstream(*[slow] * limit)
    for k in range(limit):  # every cached session is taken while these stream
        s >> Chat(f"held {k}", conv=f"h{k}", name=f"h{k}", hold=1)
    s >> Concurrently(*[Regenerate(conv=f"o{k}", name=f"over{k}") for k in range(over)])
    for k in range(over):
        s << ClientGot(f"over{k}", outcome="success", text=echo(f"overflow {k}", 0))
        s << no_cache_fields(f"over{k}")
    for k in range(limit):
        s >> Resume(f"h{k}")
        s << ClientGot(f"h{k}", outcome="success", text=LONG)
    s << RelayReported("cache_skipped", count=over, fields={"reason": "capacity_bypass"})
    for k in range(over):
        s >> Branch(f"o{k}")  # the admitted original answer, now ambiguous
        s >> Chat("and then?", conv=f"o{k}", name=f"after_o{k}")
        s << UpstreamReceived(replayed=[], continuity=intact(0))
    for conv in [*(f"h{k}" for k in range(limit)), "u"]:
        s >> Chat("and then?", conv=conv, name=f"after_{conv}")
        s << UpstreamReceived(replayed=chain(f"{conv}1" if conv == "u" else conv))
    return s


@scenario()
def fence_poisons_a_generation_in_flight(seed: Seed) -> Scenario:
    """A fence while a cached generation of that caller is in flight: the generation is
    still delivered, but its position is poisoned for good: neither it nor a later
    regeneration there with other text replays; the block after them does."""
    alice = {"user": f"alice-{seed.randint('alice', 1, 999)}"}
    fence_user = alice["user"] if seed.choice("fence", ["caller", "all"]) == "caller" else None
    s = Scenario("fence_poisons_a_generation_in_flight", relay=CACHE)
    s >> Chat("hello", name="t1", extra=alice)
    s >> Upstream(reply(LONG, reasoning=["r"], deltas=30, latency_ms=30))
    s >> Chat("more", name="t2", hold=1, extra=alice)
    s >> DirectResponses("meanwhile", user=fence_user, name="direct", stream=False)
    s << ClientGot("direct", outcome="success", text=echo("meanwhile", 0))
    s >> Resume("t2")
    s << ClientGot("t2", outcome="success", text=LONG)
    s << UpstreamReceived("t2", replayed=chain("t1"), continuity=intact(1))
    s >> Upstream(reply("Another version", reasoning=["r"]))
    s >> Branch("t1")
    s >> Chat("more", name="t2b", extra=alice)  # a regeneration, other text
    s << ClientGot("t2b", outcome="success", text="Another version")
    s << UpstreamReceived("t2b", replayed=[], continuity=intact(0))  # t1 is fenced
    for version in ("t2", "t2b"):
        s >> Branch(version)
        s >> Chat("and then?", name=f"after_{version}", extra=alice)
        s << UpstreamReceived(replayed=[], continuity=intact(0))
    s << RelayReported("cache_plan", fields={"rejected": Matches("start_poisoned")})
    s >> Chat("last", name="last", extra=alice)
    s << UpstreamReceived(replayed=[ReplayOf("after_t2b", at=5)], continuity=intact(1))
    return s
