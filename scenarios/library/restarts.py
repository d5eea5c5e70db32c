"""Relay restarts and kills between and during turns."""

from __future__ import annotations

from scenarios.dsl import (
    AtLeast,
    AwaitCrash,
    Chat,
    ClientGot,
    Contains,
    Holds,
    KillRelay,
    Matches,
    Regenerate,
    RelayAlive,
    RestartRelay,
    Resume,
    Scenario,
    Upstream,
    UpstreamReceived,
    reply,
)
from scenarios.faults.crash import arm, every_point
from scenarios.library import scenario
from scenarios.seed import Seed


@scenario()
def relay_restarts_between_turns(seed: Seed) -> Scenario:
    """Turns keep working across kill -9 and graceful restarts; the upstream always gets
    the whole visible history, and (cache off) nothing is replayed."""
    s = Scenario("relay_restarts_between_turns")
    s >> Chat("first question", name="t1")
    s << ClientGot(outcome="success", text=Contains("Echo: first question"))
    s >> RestartRelay(kill=True)
    s >> Chat("second question", name="t2")
    s << ClientGot(outcome="success", text=Contains("Echo: second question"))
    s << UpstreamReceived(replayed=[], continuity={"replayed": 0})
    s << Holds(
        "t2's upstream input carries all three visible messages",
        lambda ctx: len(ctx.upstream_of(ctx.turn("t2"))[0]["body"]["input"]) == 3,
    )
    s >> RestartRelay()  # graceful: SIGTERM
    s >> Chat("third, as JSON", name="t3", stream=False)
    s << ClientGot(outcome="success", text=Contains("Echo: third, as JSON"))
    s >> Regenerate(name="t3b", stream=False)
    s << ClientGot(outcome="success", text=Contains("Echo: third, as JSON"))
    s << RelayAlive()
    return s


@scenario()
def kill_mid_stream_then_regenerate(seed: Seed) -> Scenario:
    """kill -9 after the client got N frames, and after the upstream sent N events: the
    client sees a cut (never a success); the restarted relay answers the regeneration."""
    frames = seed.randint("kill_after_frames", 1, 8)
    events = seed.randint("kill_after_events", 4, 50)
    s = Scenario("kill_mid_stream_then_regenerate")
    s >> Upstream(reply("a long answer " * 50, deltas=60, latency_ms=10))
    s >> Chat("go", name="doomed", hold=frames)
    s >> KillRelay()
    s >> Resume("doomed")
    s << ClientGot("doomed", outcome="cut", done=False, frames=AtLeast(frames))
    s >> RestartRelay()
    s >> Upstream(reply("a long answer " * 50, deltas=60, latency_ms=10))
    s >> Chat("go on", name="doomed2", hold=1)
    s >> KillRelay(after_upstream_events=events)
    s >> Resume("doomed2")
    s << ClientGot("doomed2", outcome="cut", done=False)
    s >> RestartRelay()
    s >> Regenerate(name="again")
    s << ClientGot("again", outcome="success", text=Contains("Echo: go on"))
    s << RelayAlive()
    return s


@scenario(needs=("crash_points",))
def crash_before_terminal_frame(seed: Seed) -> Scenario:
    """SIGKILL at the named point before the terminal frame: no [DONE] reaches the client;
    the restarted relay serves the retry."""
    s = Scenario("crash_before_terminal_frame")
    s >> RestartRelay(crash_at=arm("before_terminal_frame"))
    s >> Chat("answer then die", name="dies")
    s >> AwaitCrash()
    s << ClientGot("dies", outcome=Matches("^(cut|error)$"), done=False)
    s >> RestartRelay(crash_at=None)
    s >> Regenerate(name="retry")
    s << ClientGot("retry", outcome="success", done=True)
    s << RelayAlive()
    return s


# Points only a cached request reaches (covered, cache on, by crash_lifecycle_at_every_point)
# and points after which the client already holds a whole streamed answer.
CACHE_ONLY_POINTS = ("before_dispatch_intent",)
AFTER_DONE_POINTS = ("after_done_frame",)


@scenario(needs=("crash_points",))
def crash_at_every_point(seed: Seed) -> Scenario:
    """Fail at every named crash point a cache-off relay reaches, in turn (streamed and
    JSON): the dying turn never looks like a success unless it died after [DONE], and
    the restarted relay answers its regeneration."""
    s = Scenario("crash_at_every_point")
    for point in (p for p in every_point() if p not in CACHE_ONLY_POINTS):
        stream = seed.choice(f"stream@{point}", ["yes", "no"]) == "yes" or "frame" in point
        s >> RestartRelay(crash_at=arm(point))
        s >> Chat(f"die at {point}", name=f"dies@{point}", stream=stream)
        s >> AwaitCrash()
        if point in AFTER_DONE_POINTS:
            s << ClientGot(outcome="success", done=True)
        else:
            s << ClientGot(outcome=Matches("^(cut|error)$"), done=False)
        s >> RestartRelay(crash_at=None)
        s >> Regenerate(name=f"retry@{point}", stream=stream)
        s << ClientGot(outcome="success", text=Contains(f"Echo: die at {point}"))
    s << RelayAlive()
    return s
