"""Clock faults on the relay process (libfaketime): timeouts use monotonic time, so wall
jumps change nothing, while a monotonic advance fires them; with the cache on, wall jumps
change no generation deadline and no replay decision within the retention window."""

from __future__ import annotations

from dataclasses import replace

from scenarios.core import Ctx
from scenarios.dsl import (
    AdvanceMonotonic,
    AtMost,
    Branch,
    Chat,
    ClientGot,
    Holds,
    JumpWall,
    RelayAlive,
    RelayOptions,
    Resume,
    Scenario,
    Upstream,
    UpstreamEnded,
    UpstreamReceived,
    WaitFor,
    reply,
)
from scenarios.httpjson import request_json
from scenarios.library import scenario
from scenarios.library.replay import CACHE, chain, echo, intact
from scenarios.seed import Seed

TEXT = "tick tock " * 30
DAY = 86_400.0


def _relay_answers(ctx: Ctx) -> bool:
    relay = ctx.harness.require_relay()
    status, _ = request_json("GET", f"http://127.0.0.1:{relay.port}/healthz")
    return status == 200


def _elapsed_since_request(turn: str, limit_s: float) -> Holds:
    """The turn's answer came within ``limit_s`` of its request (from the history)."""

    def check(ctx: Ctx) -> bool:
        events = ctx.harness.history.events
        sent = next(e.t for e in events if e.kind == "client_request" and e["turn"] == turn)
        got = next(e.t for e in events if e.kind == "client_answer" and e["turn"] == turn)
        return got - sent <= limit_s

    return Holds(f"{turn} answered within {limit_s}s", check)


@scenario(needs=("faketime",))
def wall_clock_jumps_during_stream(seed: Seed) -> Scenario:
    """Wall jumps of ±minutes to ±days while a paced stream runs: no idle timeout fires
    early (stream succeeds), and a hang still times out on schedule after a jump back."""
    forward = abs(seed.clock_jump("forward", 60, 30 * DAY))
    backward = -abs(seed.clock_jump("backward", 60, 30 * DAY))
    hold = seed.randint("hold_frames", 1, 10)
    s = Scenario(
        "wall_clock_jumps_during_stream", clock="wall", relay=RelayOptions(idle_timeout_ms=1500)
    )
    s >> Upstream(reply(TEXT, deltas=30, latency_ms=50))  # events 50 ms apart, idle limit 1.5 s
    s >> Chat("count slowly", name="paced", hold=hold)
    s >> JumpWall(forward)
    s >> JumpWall(backward)
    s >> JumpWall()  # one seeded Jepsen-style jump, either direction
    s >> Resume("paced")
    s << ClientGot("paced", outcome="success", text=TEXT, done=True)
    s >> Upstream(reply(TEXT, deltas=30, hang_after_events=5))
    s >> Chat("then hang", name="hang", hold=1)
    s >> JumpWall(-DAY)
    s >> Resume("hang")
    s << ClientGot("hang", outcome="error", error_code="upstream_timeout")
    s << _elapsed_since_request("hang", 6.0)  # 1.5 s, not a day
    s << UpstreamEnded("hang", ended="client_gone")
    s << RelayAlive()
    return s


@scenario(needs=("faketime",))
def monotonic_advance_fires_idle_timeout(seed: Seed) -> Scenario:
    """With a 60 s idle timeout, advancing monotonic time by minutes during a hang ends it
    at once (an error chunk): the timeout really reads the monotonic clock.

    The relay notices the advance the next time its event loop wakes; the 100 ms SSE
    keepalive provides those wake-ups (and shows keepalives are not upstream progress)."""
    advance = 60 + seed.randint("advance_s", 1, 600)
    s = Scenario(
        "monotonic_advance_fires_idle_timeout",
        clock="both",
        relay=RelayOptions(idle_timeout_ms=60_000, keepalive_ms=100),
    )
    s >> Upstream(reply(TEXT, deltas=30, hang_after_events=4))
    s >> Chat("hang on", name="hang", hold=1)
    s >> AdvanceMonotonic(advance)
    # The relay renews its idle timer once it has delivered that first frame, which can
    # happen just after the advance (the client already has the frame): one round trip
    # through its event loop orders the renewal before the second advance, which alone
    # then outlasts the timeout.
    s >> WaitFor("a round trip through the relay's event loop", _relay_answers)
    s >> AdvanceMonotonic(61)
    s >> Resume("hang")
    s << ClientGot("hang", outcome="error", error_code="upstream_timeout")
    s << _elapsed_since_request("hang", 10.0)
    s << UpstreamEnded("hang", events_sent=AtMost(4))
    s << RelayAlive()
    return s


@scenario(needs=("faketime",))
def wall_clock_jumps_during_cached_generation(seed: Seed) -> Scenario:
    """Wall jumps of ±minutes and ±days (seeded, log-uniform) during a cached generation
    and between turns: no deadline moves (the generation completes and is admitted), a
    hang still times out on schedule, and after every jump, back in time included, the
    admitted blocks replay exactly where they belong (within the 30-day retention)."""
    minutes = [abs(seed.clock_jump(f"minutes@{k}", 60, 3600)) for k in range(2)]
    days = [abs(seed.clock_jump(f"days@{k}", DAY, 7 * DAY)) for k in range(2)]
    s = Scenario(
        "wall_clock_jumps_during_cached_generation",
        clock="wall",
        relay=replace(CACHE, idle_timeout_ms=1500),
    )
    s >> Chat("first", name="t1")
    s >> Upstream(reply(TEXT, reasoning=["r"], deltas=30, latency_ms=50))
    s >> Chat("second", name="t2", hold=seed.randint("hold_frames", 1, 10))
    for jump in (minutes[0], -days[0], days[1], -minutes[1]):
        s >> JumpWall(jump)
    s >> Resume("t2")
    s << ClientGot("t2", outcome="success", text=TEXT, done=True)
    s << UpstreamReceived("t2", replayed=chain("t1"), continuity=intact(1))
    s >> JumpWall(-days[1])  # back to before t2 was observed
    s >> Chat("third", name="t3", stream=False)
    s << UpstreamReceived(replayed=chain("t1", "t2"), continuity=intact(2))
    s >> Upstream(reply(TEXT, reasoning=["r"], deltas=30, hang_after_events=5))
    s >> Chat("then hang", name="hang", hold=1)
    s >> JumpWall()  # one seeded jump of up to a day, either way
    s >> Resume("hang")
    s << ClientGot("hang", outcome="error", error_code="upstream_timeout")
    s << _elapsed_since_request("hang", 6.0)
    s >> Branch("t3")
    s >> Chat("fourth", name="t4", stream=seed.choice("mode", ["sse", "json"]) == "sse")
    s << UpstreamReceived(replayed=chain("t1", "t2", "t3"), continuity=intact(3))
    s << ClientGot("t4", text=echo("fourth", 3))
    return s
