"""Disk faults on the relay's data directory. With the cache off the relay must not need
the disk at all: a full disk or failing writes change nothing for the client. With the
cache on, a safety record that cannot be written means 503, never an unsafe forward."""

from __future__ import annotations

from dataclasses import replace

from scenarios.dsl import (
    AtLeast,
    Chat,
    ClientGot,
    Contains,
    DeleteGuard,
    DirectResponses,
    FailWrites,
    FillDisk,
    FreeDisk,
    Holds,
    KillRelay,
    RelayAlive,
    RelayOptions,
    RelayRefusesToStart,
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


@scenario(needs=("fiu",))
def failing_writes_latch_the_cache(seed: Seed) -> Scenario:
    """Cache on, every store write failing with EIO (libfiu: pwrite and the syncs). The
    first safety record (a capacity-bypass poison) fails, spends the reserve, fails again
    on its one retry: the cache latches (.guard). That call and every later one that needs
    a safety record (a fence, an intent) get 503 cache_unavailable and never reach the
    upstream, even once the disk is healthy again. The relay refuses to reuse the store
    until the guard is deleted; then recovery poisons the generation that was in flight
    and the old chain replays."""
    modes = [seed.choice(f"mode@{k}", ["sse", "json"]) == "sse" for k in range(3)]
    s = Scenario("failing_writes_latch_the_cache", fiu=True,
                 relay=replace(CACHE, cache_max_concurrent=1))  # fmt: skip
    s >> Chat("first", name="t1")
    s >> Upstream(reply("in flight " * 20, reasoning=["r"], deltas=20, latency_ms=40))
    s >> Chat("hold the only session", conv="held", name="held", hold=1)
    s >> FailWrites(store_only=True)
    s >> Chat("bypassed", conv="bypass", name="bypass", stream=modes[0])  # no session left
    s << ClientGot(status=503, error_code="cache_unavailable")
    s << UpstreamReceived(calls=0)
    s << RelayReported("cache_reserve_released", fields={"what": "bypass poison"})
    s << RelayReported("cache_latched", fields={"what": "bypass poison"})
    s >> DirectResponses("fence me", stream=modes[1], name="direct")
    s << ClientGot(status=503, error_code="cache_unavailable")
    s << UpstreamReceived(calls=0)
    s >> Resume("held")  # its observation cannot be committed
    s << ClientGot("held", outcome="error", done=False)
    s >> FailWrites(store_only=True, heal=True)
    s >> Chat("no intent once latched", conv="intent", name="intent", stream=modes[2])
    s << ClientGot(status=503, error_code="cache_unavailable")
    s << UpstreamReceived(calls=0)
    s >> KillRelay()
    s << StoreIntegrity(intents=1)  # the held generation's: its close could not be written
    s >> RelayRefusesToStart(says="reasoning-cache.sqlite.guard exists")
    s >> DeleteGuard()
    s >> RestartRelay()
    s << RelayReported("cache_opened", fields={"recovered_intents": "1"})
    s >> Chat("second", name="t2")
    s << UpstreamReceived(replayed=chain("t1"), continuity=intact(1))
    return s


@scenario(needs=("tmpfs",), slow=True)  # about 50 s: 70 requests, a checkpoint each
def small_volume_fills_and_restarts(seed: Seed) -> Scenario:
    """A 2 MiB tmpfs filled through requests alone: the WAL stays bounded by the reserve,
    admission stops before the volume is full (answers are still served and observed),
    and after a kill -9 with nothing freed the relay restarts, its store intact."""
    s = Scenario("small_volume_fills_and_restarts", tmpfs_bytes=2 << 20, relay=CACHE)
    for k in range(70):
        s >> Upstream(reply(f"{k} " + "payload " * 4000, reasoning=["r"], deltas=2))
        s >> Chat(f"fill {k}", conv=f"c{k}", name=f"f{k}", stream=seed.randint(f"s{k}", 0, 1) == 1)
        s << ClientGot(f"f{k}", outcome="success")
    s << RelayReported("cache_admission_refused", count=AtLeast(5))
    s << Holds("the volume is nearly full", lambda ctx: ctx.tmpfs is not None
               and ctx.tmpfs.free_bytes() < 256 * 1024)  # fmt: skip
    s >> KillRelay()
    s << StoreIntegrity(intents=0)
    s >> RestartRelay()
    s << RelayReported("cache_opened", count=2)
    s >> Chat("after the restart", conv="c0", name="again")
    s << ClientGot("again", outcome="success")
    s << UpstreamReceived(replayed=chain("f0"), continuity=intact(1))
    return s
