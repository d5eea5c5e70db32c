"""Retention under libfaketime (design §6 Retention): nothing is deleted before both the
idle cutoff and the deletion barrier allow it; wall jumps and restarts start the barrier
again; ancestors outlive descendants; a pinned dependency survives; counts are exact.

The relay runs cleanup every 200 ms here (``REASONING_CACHE_CLEANUP_INTERVAL_MS``), and
:class:`AwaitCleanup` waits for the second run logged after it starts, which began after
every clock move before it: a whole run on the new clock, never a sleep. Stored payload
counts come from the cache API (``encryptedRecords``), read without a clock sample.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from scenarios.core import Action, Ctx, Expectation, ExpectationFailed, matches
from scenarios.dsl import (
    AwaitRelayEvent,
    Branch,
    Chat,
    Disconnect,
    RelayOptions,
    RelayReported,
    RestartRelay,
    Scenario,
    Upstream,
    UpstreamReceived,
    reply,
)
from scenarios.httpjson import request_json
from scenarios.library import scenario
from scenarios.library.replay import chain, intact
from scenarios.relaylog import parse_relay_events
from scenarios.seed import Seed

DAY = 86_400.0
ADMIN = "retention-admin-token-0123456789"
RETAIN = RelayOptions(
    cache_enabled=True,
    idle_timeout_ms=40 * 86_400_000,  # monotonic: a month of fake idling fires no timeout
    extra_env=(("REASONING_CACHE_CLEANUP_INTERVAL_MS", "200"), ("RELAY_ADMIN_TOKEN", ADMIN)),
)
_RUN = re.compile(r"^[^\n]* relay cache_cleanup\b[^\n]*\n", re.MULTILINE)


@dataclass
class AwaitCleanup(Action):
    """Wait for a whole cleanup run that began after this step; note what it reported."""

    timeout: float = 10.0

    def run(self, ctx: Ctx) -> None:
        proc = ctx.harness.require_relay().proc
        start = len(proc.stderr_text())
        first = proc.wait_for_stderr(_RUN.pattern, self.timeout, start)
        second = proc.wait_for_stderr(_RUN.pattern, self.timeout, first.end())
        [(_, fields)] = parse_relay_events(second.group(0))
        incarnation = ctx.harness.require_relay().incarnation
        ctx.harness.history.record("note", note="retention_run", incarnation=incarnation, **fields)


@dataclass
class Cleaned(Expectation):
    """The last awaited cleanup run: ``barrier`` open or closed; ``reclaimed``: exactly
    how many payloads every run since the previous awaited one (same relay) reclaimed."""

    barrier: str
    reclaimed: Any = 0
    fields: dict[str, Any] = field(default_factory=dict)

    def check(self, ctx: Ctx) -> None:
        runs = [e for e in ctx.harness.history.of("note") if e.get("note") == "retention_run"]
        if not runs:
            raise ExpectationFailed("no cleanup run was awaited (>> AwaitCleanup() first)")
        got = dict(runs[-1].data)
        earlier = [e for e in runs[:-1] if e["incarnation"] == got["incarnation"]]
        before = int(earlier[-1]["total_reclaimed"]) if earlier else 0
        got["reclaimed"] = str(int(got["total_reclaimed"]) - before)
        wanted = {"barrier": self.barrier, "reclaimed": str(self.reclaimed), **self.fields}
        if not all(matches(v, got.get(k)) for k, v in wanted.items()):
            raise ExpectationFailed(f"cleanup run reported {got}, expected {wanted}")


@dataclass
class Stored(Expectation):
    """The cache API's counts: payloads kept, and observations (the ledger, never deleted)."""

    payloads: int
    observations: Any = None

    def check(self, ctx: Ctx) -> None:
        relay = ctx.harness.require_relay()
        url = f"http://127.0.0.1:{relay.port}/api/cache/reasoning"
        _, body = request_json("GET", url, headers={"Authorization": f"Bearer {ADMIN}"})
        records = body["encryptedRecords"]
        got = (records["payloads"], records["observations"])
        if records["payloads"] != self.payloads or not (
            self.observations is None or matches(self.observations, records["observations"])
        ):
            raise ExpectationFailed(f"(payloads, observations) = {got}, expected "
                                    f"({self.payloads}, {self.observations!r})")  # fmt: skip


@dataclass
class Idle(Action):
    """Both clocks move ``days`` forward (time passes, the relay serving nothing).
    ``expires``: stored blocks get idle past retention, so owed replays may not happen."""

    days: float
    expires: bool = False

    def run(self, ctx: Ctx) -> None:
        assert ctx.clock is not None, "Idle needs Scenario(clock='both')"
        ctx.clock.advance_monotonic(self.days * DAY)
        if self.expires:
            ctx.harness.record_fault("idle_past_retention", allows_loss=True, days=self.days)


@dataclass
class Wall(Action):
    """The wall clock alone steps ``seconds`` (``expires``: blocks look idle past retention)."""

    seconds: float
    expires: bool = False

    def run(self, ctx: Ctx) -> None:
        assert ctx.clock is not None, "Wall needs Scenario(clock='wall')"
        ctx.clock.jump_wall(self.seconds)
        if self.expires:
            ctx.harness.record_fault("wall_past_retention", allows_loss=True)


def turns(s: Scenario, *names: str, conv: str = "main") -> None:
    """Consecutive admitted answers in ``conv``: each replays the ones before it."""
    for k, name in enumerate(names):
        s >> Chat(f"{name} question", name=name, conv=conv, stream=k % 2 == 0)


@scenario(needs=("faketime",))
def retention_wall_jumps_delete_nothing(seed: Seed) -> Scenario:
    """Wall +40 d, -2 d and repeated ±262 s bumps: every one restarts the deletion barrier,
    so nothing is deleted though the blocks look 40 days idle (they stop replaying)."""
    bumps = seed.randint("bumps", 2, 4)
    s = Scenario("retention_wall_jumps_delete_nothing", clock="wall", relay=RETAIN)
    turns(s, "t1", "t2")
    s << Stored(payloads=2, observations=2)
    s >> Wall(40 * DAY, expires=True)
    s >> AwaitCleanup()
    s << Cleaned("closed")
    s << RelayReported("retention_barrier_reset", count=1, fields={"cause": "drift"})
    s >> Chat("t3 question", name="t3")  # both blocks now look 40 days idle
    s << UpstreamReceived("t3", replayed=[])
    s << RelayReported("cache_plan", fields={"rejected": "['record_expired']"})
    s >> Wall(-2 * DAY)
    s >> AwaitCleanup()
    for _ in range(bumps):
        for bump in (262.0, -262.0):
            s >> Wall(bump)
            s >> AwaitCleanup()
            s << Cleaned("closed")
    s << RelayReported("retention_barrier_reset", count=2 + 2 * bumps)
    s << RelayReported("cache_cleanup", fields={"barrier": "open"}, count=0)
    s << Stored(payloads=3, observations=3)
    return s


@scenario(needs=("faketime",))
def retention_reclaims_after_cutoff_and_barrier(seed: Seed) -> Scenario:
    """29 idle days: the barrier holds. 31: the idle chain (its payloads exactly) goes,
    the conversation used meanwhile stays and still replays; observations all stay."""
    depth = seed.randint("depth", 2, 4)
    names = [f"m{k}" for k in range(depth)]
    s = Scenario("retention_reclaims_after_cutoff_and_barrier", clock="both", relay=RETAIN)
    turns(s, *names)
    turns(s, "o1", conv="other")
    s >> Idle(29)
    s >> AwaitCleanup()
    s << Cleaned("closed")
    s >> Chat("o2 question", name="o2", conv="other")  # uses o1: touched at day 29
    s << UpstreamReceived("o2", replayed=chain("o1"), continuity=intact(1))
    s >> Idle(2, expires=True)
    s >> AwaitCleanup()
    s << Cleaned("open", reclaimed=depth, fields={"pinned": "0"})
    s << Stored(payloads=2, observations=depth + 2)
    s >> Chat("o3 question", name="o3", conv="other")
    s << UpstreamReceived("o3", replayed=chain("o1", "o2"), continuity=intact(2))
    s >> AwaitCleanup()
    s << Cleaned("open", reclaimed=0)
    return s


@scenario(needs=("faketime",))
def retention_pinned_ancestor_outlives_descendants(seed: Seed) -> Scenario:
    """A generation in flight on top of t1 pins it: a month later its idle descendants go
    first and t1 survives; once that generation ends, t1 goes too. Counts are exact."""
    s = Scenario("retention_pinned_ancestor_outlives_descendants", clock="both", relay=RETAIN)
    turns(s, "t1", "t2", "t3")
    s >> Branch("t1", conv="side")
    s >> Upstream(reply("held " * 20, reasoning=["r"], deltas=20, hang_after_events=3))
    s >> Chat("side question", name="held", conv="side", hold=1)  # replays and pins t1
    s >> Idle(31, expires=True)
    s >> AwaitCleanup()
    s << Cleaned("open", reclaimed=2, fields={"pinned": "1"})
    s << Stored(payloads=1, observations=3)
    s >> Disconnect("held")
    s >> AwaitRelayEvent("cache_poisoned")
    s >> AwaitCleanup()
    s << Cleaned("open", reclaimed=1, fields={"pinned": "0"})
    s << Stored(payloads=0, observations=3)
    s << UpstreamReceived("held", replayed=chain("t1"))
    return s


@scenario(needs=("faketime",))
def retention_restarts_inside_the_barrier(seed: Seed) -> Scenario:
    """Each restart begins the barrier again: 40 idle days across a restart at day 20
    delete nothing; restarted at day 40, the payloads go exactly 30 days later."""
    s = Scenario("retention_restarts_inside_the_barrier", clock="both", relay=RETAIN)
    turns(s, "t1", "t2")
    s >> Idle(20)
    s >> RestartRelay(kill=seed.choice("restart", ["stop", "kill"]) == "kill")
    s << Stored(payloads=2, observations=2)
    s >> Idle(20, expires=True)
    s >> AwaitCleanup()
    s << Cleaned("closed")
    s >> RestartRelay()
    s >> Idle(30)
    s >> AwaitCleanup()
    s << Cleaned("open", reclaimed=2)
    s << Stored(payloads=0, observations=2)
    return s


@scenario(needs=("faketime",))
def retention_sixty_day_window(seed: Seed) -> Scenario:
    """REASONING_CACHE_RETENTION_DAYS=60: at day 31 the barrier is open but nothing is 60
    days idle (and it still replays); at day 61 only the conversation left idle goes."""
    relay = replace(RETAIN, extra_env=(*RETAIN.extra_env, ("REASONING_CACHE_RETENTION_DAYS", "60")))
    s = Scenario("retention_sixty_day_window", clock="both", relay=relay)
    turns(s, "a1", "a2")
    turns(s, "b1", conv="idle")
    s >> Idle(31)
    s >> AwaitCleanup()
    s << Cleaned("open", reclaimed=0)
    s >> Chat("a3 question", name="a3")
    s << UpstreamReceived("a3", replayed=chain("a1", "a2"), continuity=intact(2))
    s >> Idle(30, expires=True)
    s >> AwaitCleanup()
    s << Cleaned("open", reclaimed=1)
    s << Stored(payloads=3, observations=4)
    return s
