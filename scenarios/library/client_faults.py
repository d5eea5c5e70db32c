"""Client-side faults: a slow or stalled reader, a disconnect, oversized and bad uploads."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from scenarios.core import Ctx, ExpectationFailed
from scenarios.dsl import (
    AtMost,
    AwaitRelayEvent,
    AwaitUpstreamEnd,
    Chat,
    ClientGot,
    Contains,
    Disconnect,
    Holds,
    InRange,
    KillRelay,
    PostRaw,
    ReadSlowly,
    Regenerate,
    RelayAlive,
    RelayOptions,
    RestartRelay,
    Scenario,
    Stall,
    Upstream,
    UpstreamEnded,
    UpstreamReceived,
    WaitFor,
    reply,
)
from scenarios.faults.network import server_send_queue
from scenarios.library import scenario
from scenarios.seed import Seed

# 2500 message items of 3 KB: 7.5 MB for the client, ~35 MB upstream (each item's done
# events repeat its text). Loopback buffers absorb ~4-5 MB of client frames (autotuned
# send buffer), so a stalled client blocks the fake well before its last event.
BIG_PARTS = [f"{i:06d}" + "y" * 2994 for i in range(2500)]
BIG_TEXT = "".join(BIG_PARTS)
BIG_EVENTS = 6 * len(BIG_PARTS) + 3
CLIENT_ERROR = InRange(400, 499)


def _upstream_call(ctx: Ctx) -> dict[str, Any]:
    assert ctx.harness.fake is not None
    return ctx.harness.fake.exchanges()[-1]


def _upstream_blocked() -> Callable[[Ctx], bool]:
    """A probe: the fake's socket to the relay holds unsent bytes, unchanged for 200 ms,
    i.e. the relay has stopped reading (read from the kernel's queues, not the fake)."""
    seen = {"queued": -1, "since": 0.0}

    def probe(ctx: Ctx) -> bool:
        assert ctx.harness.fake is not None
        port = urlsplit(ctx.harness.fake.base_url).port or 0
        queued = server_send_queue(port)
        if queued is None:
            raise ExpectationFailed("the fake's connection to the relay closed during the stall")
        now = time.monotonic()
        if queued != seen["queued"] or queued == 0:
            seen["queued"], seen["since"] = queued, now
            return False
        return now - seen["since"] >= 0.2

    return probe


def _still_sending(call: dict[str, Any], below_events: float) -> bool:
    return call["ended"] is None and len(call["events"]) < below_events


@scenario()
def slow_client_backpressure(seed: Seed) -> Scenario:
    """The upstream is read no faster than the client reads: while the client stalls, the
    fake's sends block well short of the whole answer; a slow read then gets all of it."""
    hold = seed.randint("hold_frames", 1, 20)
    s = Scenario("slow_client_backpressure", relay=RelayOptions(delivery_timeout_ms=20_000))
    s >> Upstream(reply(BIG_PARTS[0], more_messages=BIG_PARTS[1:], deltas=1))
    s >> Chat("write a lot", name="big", hold=hold, rcvbuf=4096)
    s >> Stall("big")
    s >> WaitFor("the relay to stop reading the upstream", _upstream_blocked(), timeout=15)
    s << Holds(
        "the fake has sent only part of the answer, and is still sending",
        lambda ctx: _still_sending(_upstream_call(ctx), 0.9 * BIG_EVENTS),
    )
    s >> ReadSlowly("big", bytes_per_read=64 * 1024, pause_s=0.001, timeout=60, rcvbuf=1 << 20)
    s << ClientGot("big", outcome="success", text=BIG_TEXT, done=True)
    s << UpstreamEnded("big", ended="finish")
    s << RelayAlive()
    return s


@scenario(slow=True)
def kill_while_client_stalls(seed: Seed) -> Scenario:
    """kill -9 while the client stalls and the relay is blocked writing to it: the client
    ends with a cut, never a success; the restarted relay serves the regeneration."""
    s = Scenario("kill_while_client_stalls")
    s >> Upstream(reply(BIG_PARTS[0], more_messages=BIG_PARTS[1:], deltas=1))
    s >> Chat("write a lot", name="big", hold=seed.randint("hold_frames", 1, 20), rcvbuf=4096)
    s >> Stall("big")
    s >> WaitFor("the relay to stop reading the upstream", _upstream_blocked(), timeout=15)
    s >> KillRelay()
    s >> ReadSlowly("big", bytes_per_read=64 * 1024, pause_s=0.0, timeout=60, rcvbuf=1 << 20)
    s << ClientGot("big", outcome="cut", done=False)
    s >> RestartRelay()
    s >> Regenerate(name="again")
    s << ClientGot("again", outcome="success", text=Contains("Echo: write a lot"))
    return s


@scenario()
def client_disconnect_cancels_upstream(seed: Seed) -> Scenario:
    """A client that leaves mid-stream makes the relay drop its upstream call at once."""
    hold = seed.randint("hold_frames", 1, 10)
    s = Scenario("client_disconnect_cancels_upstream")
    s >> Upstream(reply("x" * 4000, deltas=400, latency_ms=5))
    s >> Chat("long answer please", name="left", hold=hold)
    s >> Disconnect("left")
    s >> AwaitUpstreamEnd(timeout=2.0)  # 400 events x 5 ms would take 2 s uncancelled
    s << UpstreamEnded("left", ended="client_gone", events_sent=AtMost(200))
    s >> AwaitRelayEvent("client_disconnected")
    s << ClientGot("left", outcome="disconnected")
    s >> Chat("still there?", name="next")
    s << ClientGot("next", outcome="success", text=Contains("Echo: still there?"))
    s << RelayAlive()
    return s


def _oversized_body(seed: Seed, limit: int) -> bytes:
    size = limit + seed.randint("overshoot", 1, 200_000)
    content = "a" * size
    return json.dumps(
        {"model": "gpt-5", "messages": [{"role": "user", "content": content}]}
    ).encode()


@scenario()
def oversized_upload_413(seed: Seed) -> Scenario:
    """An upload declaring more than RELAY_MAX_REQUEST_BYTES gets 413 before its body is
    read, and never reaches the upstream; the next request is served."""
    s = Scenario("oversized_upload_413", relay=RelayOptions(max_request_bytes=4096))
    s >> PostRaw(_oversized_body(seed, 4096), name="declared")
    s << ClientGot(status=413, error_code="request_too_large")
    s << UpstreamReceived(calls=0)
    s >> Chat("small is fine", name="small")
    s << ClientGot(outcome="success")
    s << RelayAlive()
    return s


@scenario()
def oversized_chunked_upload_413(seed: Seed) -> Scenario:
    """The same limit for a chunked upload (no Content-Length): 413 with the envelope."""
    s = Scenario("oversized_chunked_upload_413", relay=RelayOptions(max_request_bytes=4096))
    s >> PostRaw(_oversized_body(seed, 4096), name="chunked", chunked=True, piece_bytes=1024)
    s << ClientGot(status=413, error_code="request_too_large")
    s << UpstreamReceived(calls=0)
    s >> Chat("small is fine", name="small")
    s << ClientGot(outcome="success")
    s << RelayAlive()
    return s


@scenario()
def bad_input_never_crashes(seed: Seed) -> Scenario:
    """Seeded garbage, deep nesting, bad UTF-8 and wrong types get 4xx; the relay lives."""
    rng = seed.stream("garbage")
    bodies = [
        b"{not json",
        b"[]",
        b'{"messages": 5}',
        b"\xff\xfe\xfa",
        b"[" * 100_000,
        b'{"model": "gpt-5", "messages": [{"role": "wizard", "content": "hi"}]}',
        bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 3000))),
    ]
    s = Scenario("bad_input_never_crashes")
    for index, body in enumerate(bodies):
        s >> PostRaw(body, name=f"bad{index}")
        s << ClientGot(outcome="error", status=CLIENT_ERROR)
    s >> PostRaw(
        b'{"model":"gpt-5","messages":[]}',
        name="wrong_type",
        headers={"Content-Type": "text/plain"},
    )
    s << ClientGot(status=CLIENT_ERROR)
    s << UpstreamReceived(calls=0)
    s << RelayAlive()
    return s
