"""Upstream stream faults: cuts, resets, malformed and oversized events, hangs.

A text of ``deltas`` pieces streams as 8 + deltas events (created, in_progress, item
added, part added, the deltas, text done, part done, item done, completed), so a cut at
event k in [3, deltas + 6] always lands before the terminal event.
"""

from __future__ import annotations

from scenarios.dsl import (
    Chat,
    ClientGot,
    Contains,
    RelayAlive,
    RelayOptions,
    RelayReported,
    Scenario,
    Upstream,
    UpstreamEnded,
    UpstreamReceived,
    error_event,
    http_error,
    reply,
)
from scenarios.library import scenario
from scenarios.seed import Seed

TEXT = "The quick brown fox jumps over the lazy dog, twice over."
DELTAS = 12
LAST_BEFORE_TERMINAL = DELTAS + 7  # events sent before response.completed


@scenario()
def upstream_cut_mid_stream(seed: Seed) -> Scenario:
    """A cut (by events, by bytes) or a reset mid-stream fails visibly: no [DONE], no 200."""
    cut = seed.randint("cut_event", 3, LAST_BEFORE_TERMINAL)
    cut_bytes = seed.randint("cut_bytes", 200, 2500)
    reset = seed.randint("reset_event", 1, LAST_BEFORE_TERMINAL)
    s = Scenario("upstream_cut_mid_stream", relay=RelayOptions(idle_timeout_ms=2000))
    s >> Upstream(reply(TEXT, deltas=DELTAS, cut_after_events=cut))
    s >> Chat("tell me a story", name="cut_events")
    s << ClientGot(outcome="error", done=False, error_code="upstream_protocol_error")
    s << UpstreamEnded(events_sent=cut, outcome="broken")
    s >> Upstream(reply(TEXT, deltas=DELTAS, cut_after_bytes=cut_bytes))
    s >> Chat("again, as JSON", stream=False, name="cut_bytes")
    s << ClientGot(outcome="error", status=502)
    s >> Upstream(reply(TEXT, deltas=DELTAS, reset_after_events=reset))
    s >> Chat("once more", name="reset")
    s << ClientGot(outcome="error", done=False, error_message=Contains("before a terminal event"))
    s << UpstreamEnded(ended="reset")
    s << RelayReported("stream_failed", fields={"code": "upstream_protocol_error"})
    s >> Chat("and now a normal answer", name="after")
    s << ClientGot(outcome="success", done=True, text=Contains("Echo: and now a normal answer"))
    s << UpstreamReceived(replayed=[])
    s << RelayAlive()
    return s


@scenario()
def malformed_sse(seed: Seed) -> Scenario:
    """Broken JSON or an over-limit event fails; a sliced stream or a missing final blank
    line after a complete terminal event is still a success with the same text."""
    broken_at = seed.randint("malformed_event", 2, LAST_BEFORE_TERMINAL)
    slice_bytes = seed.randint("slice_bytes", 1, 16)
    s = Scenario("malformed_sse", relay=RelayOptions(max_sse_event_bytes=4096))
    s >> Upstream(reply(TEXT, deltas=DELTAS, malformed_at_event=broken_at))
    s >> Chat("hi", name="malformed")
    s << ClientGot(outcome="error", done=False, error_code="upstream_protocol_error")
    s >> Upstream(reply(TEXT, deltas=DELTAS, oversized_event_bytes=20_000, oversized_at_event=4))
    s >> Chat("hi again", stream=False, name="oversized")
    s << ClientGot(outcome="error", status=502)
    s >> Upstream(reply(TEXT, deltas=DELTAS, slice_bytes=slice_bytes, slice_random=True))
    s >> Chat("sliced please", name="sliced")
    s << ClientGot(outcome="success", text=TEXT, finish_reason="stop")
    s >> Upstream(reply(TEXT, deltas=DELTAS, omit_final_blank_line=True))
    s >> Chat("no final blank line", name="no_blank")
    s << ClientGot(outcome="success", text=TEXT, done=True)
    s << RelayAlive()
    return s


@scenario()
def idle_timeout_hang(seed: Seed) -> Scenario:
    """A silent upstream ends in the idle timeout: 504 JSON, or an error chunk when
    streaming; the relay abandons the upstream call (the fake sees it go)."""
    hang_at = seed.randint("hang_event", 4, LAST_BEFORE_TERMINAL)
    s = Scenario("idle_timeout_hang", relay=RelayOptions(idle_timeout_ms=300))
    s >> Upstream(reply(TEXT, deltas=DELTAS, hang_after_events=hang_at))
    s >> Chat("stream then stall", name="streamed")
    s << ClientGot(outcome="error", done=False, error_code="upstream_timeout")
    s << UpstreamEnded(ended="client_gone", events_sent=hang_at)
    s >> Upstream(reply(TEXT, deltas=DELTAS, hang_after_events=0))
    s >> Chat("say nothing", stream=False, name="json")
    s << ClientGot(outcome="error", status=504, error_code="upstream_timeout")
    s << UpstreamEnded(ended="client_gone", events_sent=0)
    s << RelayReported("stream_failed", fields={"code": "upstream_timeout"})
    s << RelayAlive()
    return s


@scenario()
def upstream_failures_never_look_successful(seed: Seed) -> Scenario:
    """HTTP errors keep their status, `error` events and `response.failed` become errors,
    an incomplete answer says `length`: no failed generation reaches the client as a
    success (the history check confirms it for every turn)."""
    after = seed.randint("error_after_events", 3, 10)
    s = Scenario("upstream_failures_never_look_successful")
    s >> Upstream(http_error(429, "Rate limit reached", "rate_limit_exceeded"))
    s >> Chat("rate limited", name="http429", stream=False)
    s << ClientGot(outcome="error", status=429, error_message="Rate limit reached")
    s >> Upstream({**reply(TEXT, deltas=DELTAS), **error_event("boom", after_events=after)})
    s >> Chat("error event", name="error_event")
    s << ClientGot(outcome="error", done=False)
    s >> Upstream(reply(TEXT, deltas=DELTAS, status="failed"))
    s >> Chat("failed", name="failed", stream=False)
    s << ClientGot(outcome="error")
    s >> Upstream(reply(TEXT, deltas=DELTAS, status="incomplete"))
    s >> Chat("too long", name="incomplete")
    s << ClientGot(outcome="success", finish_reason="length", done=True)
    s << RelayAlive()
    return s
