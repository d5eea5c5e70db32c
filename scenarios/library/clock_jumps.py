"""Clock faults on the relay process (libfaketime): timeouts use monotonic time, so wall
jumps change nothing, while a monotonic advance fires them."""

from __future__ import annotations

from scenarios.core import Ctx
from scenarios.dsl import (
    AdvanceMonotonic,
    AtMost,
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
    reply,
)
from scenarios.library import scenario
from scenarios.seed import Seed

TEXT = "tick tock " * 30
DAY = 86_400.0


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
    s >> Resume("hang")
    s << ClientGot("hang", outcome="error", error_code="upstream_timeout")
    s << _elapsed_since_request("hang", 10.0)
    s << UpstreamEnded("hang", events_sent=AtMost(4))
    s << RelayAlive()
    return s
