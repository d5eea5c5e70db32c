"""Fault actions: kill and restart the relay, wait for it, move its clocks, fill or
break its disk (``scenario >> KillRelay()`` ...). Conversation steps live in
:mod:`scenarios.steps`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scenarios.core import Action, Ctx, ExpectationFailed
from scenarios.faults import crash
from scenarios.faults.disk import eio_on_writes, fiu_ctrl
from scenarios.procs import StartupError
from scenarios.wait import wait_until

# --- process faults ---------------------------------------------------------------------------


@dataclass
class KillRelay(Action):
    """SIGKILL the relay now, or once the upstream sent N events of the current call."""

    after_upstream_events: int | None = None

    def run(self, ctx: Ctx) -> None:
        if self.after_upstream_events is not None:
            crash.kill_after_upstream_events(ctx.harness, self.after_upstream_events)
        else:
            ctx.harness.kill_relay()


@dataclass
class RestartRelay(Action):
    """Stop (or ``kill`` -9) the relay and start it again, optionally changed."""

    kill: bool = False
    cache: bool | None = None
    crash_at: str | None = None
    credential: int | None = None  # switch the upstream API key (RelayOptions.credential)

    def run(self, ctx: Ctx) -> None:
        changes: dict[str, Any] = {"crash_at": self.crash_at}
        if self.cache is not None:
            changes["cache_enabled"] = self.cache
        if self.credential is not None:
            changes["credential"] = self.credential
        ctx.harness.restart_relay(kill=self.kill, **changes)


@dataclass
class AwaitCrash(Action):
    """Wait for the relay to SIGKILL itself at its armed crash point."""

    timeout: float = 10.0

    def run(self, ctx: Ctx) -> None:
        ctx.harness.wait_relay_exit(self.timeout)


@dataclass
class AwaitRelayEvent(Action):
    """Wait for a relay log event (instead of sleeping)."""

    event: str
    timeout: float = 10.0

    def run(self, ctx: Ctx) -> None:
        relay = ctx.harness.require_relay()
        relay.proc.wait_for_stderr(rf" relay {self.event}\b", self.timeout)


@dataclass
class AwaitUpstreamEnd(Action):
    """Wait until the newest upstream call has ended (the fake closed or lost it)."""

    timeout: float = 10.0

    def run(self, ctx: Ctx) -> None:
        assert ctx.harness.fake is not None
        ctx.harness.fake.wait_for_end(self.timeout)


# --- clock and disk faults --------------------------------------------------------------------


@dataclass
class JumpWall(Action):
    """Step the relay's wall clock (seconds; None draws a seeded Jepsen-style jump)."""

    seconds: float | None = None

    def run(self, ctx: Ctx) -> None:
        if ctx.clock is None:
            raise ExpectationFailed("JumpWall needs Scenario(clock='wall')")
        jump = self.seconds if self.seconds is not None else ctx.seed.clock_jump("wall")
        ctx.clock.jump_wall(jump)


@dataclass
class AdvanceMonotonic(Action):
    seconds: float

    def run(self, ctx: Ctx) -> None:
        if ctx.clock is None:
            raise ExpectationFailed("AdvanceMonotonic needs Scenario(clock='both')")
        ctx.clock.advance_monotonic(self.seconds)


@dataclass
class FillDisk(Action):
    leave_bytes: int = 0

    def run(self, ctx: Ctx) -> None:
        if ctx.tmpfs is None:
            raise ExpectationFailed("FillDisk needs Scenario(tmpfs_bytes=...)")
        ctx.tmpfs.fill(self.leave_bytes)


@dataclass
class RelayRefusesToStart(Action):
    """Start the relay again (stopping it first) and expect it to exit during startup with
    ``says`` in its stderr (a latched store, say)."""

    says: str

    def run(self, ctx: Ctx) -> None:
        relay = ctx.harness.require_relay()
        if relay.proc.alive:
            ctx.harness.stop_relay()
        try:
            ctx.harness.start_relay(relay.options)
        except StartupError as err:
            if self.says not in str(err):
                raise ExpectationFailed(
                    f"the relay refused to start, but not with {self.says!r}: {err}"
                ) from None
            ctx.harness.record_fault("startup_refused", says=self.says)
            return
        raise ExpectationFailed(f"the relay started; expected it to refuse with {self.says!r}")


@dataclass
class DeleteGuard(Action):
    """The operator's last step after the cache latched: delete ``<store>.guard``."""

    def run(self, ctx: Ctx) -> None:
        path = ctx.harness.cache_path
        guard = path.with_name(path.name + ".guard")
        if not guard.exists():
            raise ExpectationFailed(f"no guard at {guard}")
        guard.unlink()
        ctx.harness.record_fault("guard_deleted")


@dataclass
class FreeDisk(Action):
    def run(self, ctx: Ctx) -> None:
        if ctx.tmpfs is not None:
            ctx.tmpfs.release()


@dataclass
class FailWrites(Action):
    """EIO on write/pwrite/fsync in the running relay (always, or at a probability)."""

    probability: float | None = None
    heal: bool = False
    # pwrite and the syncs only (SQLite's I/O): plain write(2), hence the relay's log on
    # stderr, keeps working, so the relay can still report what it did.
    store_only: bool = False

    def run(self, ctx: Ctx) -> None:
        if ctx.fiu_prefix is None:
            raise ExpectationFailed("FailWrites needs Scenario(fiu=True)")
        relay = ctx.harness.require_relay()
        commands = eio_on_writes(self.probability)
        if self.store_only:
            commands = tuple(c for c in commands if "posix/io/rw/write," not in c)
        if self.heal:
            commands = tuple("disable " + c.split(" ", 1)[1].split(",")[0] for c in commands)
        for command in commands:
            fiu_ctrl(relay.proc.pid, command, ctx.fiu_prefix, ctx.harness.history)


@dataclass
class WaitFor(Action):
    """Wait for a condition on the context (bounded polling, never a bare sleep)."""

    what: str
    probe: Any  # Callable[[Ctx], bool]
    timeout: float = 10.0

    def run(self, ctx: Ctx) -> None:
        wait_until(lambda: self.probe(ctx), timeout=self.timeout, what=self.what)
