"""Disk faults on the relay's data directory. With the cache off the relay must not need
the disk at all: a full disk or failing writes change nothing for the client. With the
cache on, a safety record that cannot be written means 503, never an unsafe forward."""

from __future__ import annotations

from dataclasses import replace

from scenarios.dsl import (
    Chat,
    ClientGot,
    Contains,
    DirectResponses,
    FailWrites,
    FillDisk,
    FreeDisk,
    KillRelay,
    RelayAlive,
    RelayOptions,
    RelayReported,
    RestartRelay,
    Resume,
    Scenario,
    StoreIntegrity,
    Upstream,
    UpstreamReceived,
    reply,
)
from scenarios.library import scenario
from scenarios.library.replay import CACHE, chain, intact
from scenarios.seed import Seed


@scenario(needs=("tmpfs", "fiu"))
def disk_faults_with_cache_off(seed: Seed) -> Scenario:
    """A full data disk (tmpfs, ENOSPC) and EIO on every write/fsync (libfiu, switched on
    at run time) leave a cache-off relay serving normally."""
    s = Scenario(
        "disk_faults_with_cache_off",
        tmpfs_bytes=1 << 20,
        fiu=True,
        relay=RelayOptions(cache_enabled=False),
    )
    s >> FillDisk(leave_bytes=0)
    s >> Chat("disk is full", name="full")
    s << ClientGot(outcome="success", text=Contains("Echo: disk is full"))
    s >> FailWrites(probability=None)
    s >> Upstream(reply("still fine", deltas=seed.randint("deltas", 1, 10)))
    s >> Chat("writes fail", name="eio", stream=False)
    s << ClientGot(outcome="success", text="still fine")
    s >> FailWrites(heal=True)
    s >> FreeDisk()
    s >> Chat("all healed", name="healed")
    s << ClientGot(outcome="success")
    # The EIO turn's own log lines failed to reach stderr: proof the fault was live.
    s << RelayReported("chat_request", count=2)
    s << RelayAlive()
    return s


@scenario(needs=("tmpfs",))
def full_disk_refuses_unsafe_forwards(seed: Seed) -> Scenario:
    """Cache on, data disk full (tmpfs, ENOSPC): a call whose safety record cannot be
    written, a capacity-bypass poison marker, a fence, a dispatch intent, gets 503
    cache_unavailable and never reaches the upstream; a generation in flight fails
    visibly instead of delivering what the cache could not record. Freed, the relay
    serves and caches again, and the store passes integrity_check."""
    modes = [seed.choice(f"mode@{k}", ["sse", "json"]) == "sse" for k in range(3)]
    s = Scenario(
        "full_disk_refuses_unsafe_forwards",
        tmpfs_bytes=2 << 20,
        relay=replace(CACHE, cache_max_concurrent=1),
    )
    s >> Chat("first", name="t1")
    s >> Upstream(reply("in flight " * 20, reasoning=["r"], deltas=20, latency_ms=40))
    s >> Chat("hold the only session", conv="held", name="held", hold=1)
    s >> FillDisk(leave_bytes=0)
    s >> Chat("bypassed", conv="bypass", name="bypass", stream=modes[0])  # no session left
    s << ClientGot(status=503, error_code="cache_unavailable")
    s << UpstreamReceived(calls=0)
    s >> DirectResponses("fence me", stream=modes[1], name="direct")
    s << ClientGot(status=503, error_code="cache_unavailable")
    s << UpstreamReceived(calls=0)
    s >> Resume("held")  # its observation cannot be committed
    s << ClientGot("held", outcome="error", done=False)
    s >> Chat("no room for an intent", conv="intent", name="intent", stream=modes[2])
    s << ClientGot(status=503, error_code="cache_unavailable")
    s << UpstreamReceived(calls=0)
    s >> FreeDisk()
    s >> Chat("second", name="t2")
    s << UpstreamReceived(replayed=chain("t1"), continuity=intact(1))
    s >> Chat("third", name="t3", stream=False)
    s << UpstreamReceived(replayed=chain("t1", "t2"), continuity=intact(2))
    s >> KillRelay()
    s << StoreIntegrity(intents=1)  # the held generation's: its close could not be written
    s >> RestartRelay()
    s << RelayReported("cache_opened", fields={"recovered_intents": "1"})
    s >> Chat("fourth", name="t4")
    s << UpstreamReceived(replayed=chain("t1", "t2", "t3"), continuity=intact(3))
    return s
