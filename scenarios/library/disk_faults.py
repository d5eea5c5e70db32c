"""Disk faults on the relay's data directory. With the cache off the relay must not need
the disk at all: a full disk or failing writes change nothing for the client."""

from __future__ import annotations

from scenarios.dsl import (
    Chat,
    ClientGot,
    Contains,
    FailWrites,
    FillDisk,
    FreeDisk,
    RelayAlive,
    RelayOptions,
    RelayReported,
    Scenario,
    Upstream,
    reply,
)
from scenarios.library import scenario
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
