"""The scenario DSL: a transcript of actions (``>>``) and expectations (``<<``).

Modelled on mitmproxy's Playbook. A scenario reads top to bottom like what happened::

    s = Scenario("upstream_cut_mid_stream", relay=RelayOptions(idle_timeout_ms=300))
    s >> Upstream(reply("Hello there", cut_after_events=5))
    s >> Chat("hi")                                   # turn t1, streamed
    s << ClientGot(outcome="error", done=False)       # an error frame, no [DONE]
    s << UpstreamReceived(replayed=[])
    s << RelayReported("stream_failed")

Actions live in :mod:`scenarios.steps`, expectations in :mod:`scenarios.expect`,
placeholders and matchers in :mod:`scenarios.core`; this module re-exports them all so a
scenario needs one import. :func:`scenarios.play.play` runs a scenario against real
processes and then runs the history checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scenarios.core import (
    Action,
    AtLeast,
    AtMost,
    Contains,
    Ctx,
    Expectation,
    ExpectationFailed,
    InRange,
    Matches,
    Placeholder,
    Step,
)
from scenarios.cursor_steps import SCREENSHOT, CursorTurn
from scenarios.expect import (
    ABSENT,
    ClientGot,
    Holds,
    RelayAlive,
    RelayReported,
    ReplayOf,
    StoreIntegrity,
    UpstreamEnded,
    UpstreamReceived,
)
from scenarios.fault_steps import (
    AdvanceMonotonic,
    AwaitCrash,
    AwaitRelayEvent,
    AwaitUpstreamEnd,
    DeleteGuard,
    FailWrites,
    FillDisk,
    FreeDisk,
    JumpWall,
    KillRelay,
    RelayRefusesToStart,
    RestartRelay,
    WaitFor,
)
from scenarios.faults.clock import ClockMode
from scenarios.faults.network import default_reply, error_event, http_error, reply, toxics
from scenarios.runner import Provider, RelayOptions
from scenarios.steps import (
    AnswerTools,
    Branch,
    Chat,
    Concurrently,
    DirectResponses,
    Disconnect,
    EchoAs,
    Edit,
    FakeStrict,
    KeepReasoning,
    PostRaw,
    ReadSlowly,
    Regenerate,
    Resume,
    RotateUpstreamKey,
    Stall,
    Upstream,
)


@dataclass
class Scenario:
    name: str
    relay: RelayOptions = field(default_factory=RelayOptions)
    clock: ClockMode | None = None  # run the relay under libfaketime in this mode
    tmpfs_bytes: int | None = None  # mount a tmpfs of this size over the relay data dir
    fiu: bool = False  # run the relay under libfiu (FailWrites at run time)
    checks: tuple[str, ...] = ("all",)  # history checks to run afterwards
    doc: str = ""
    steps: list[Step] = field(default_factory=list)

    def __rshift__(self, action: Action) -> Scenario:
        if not isinstance(action, Action):
            raise TypeError(f"'>>' takes an action, got {type(action).__name__}")
        self.steps.append(action)
        return self

    def __lshift__(self, expectation: Expectation) -> Scenario:
        if not isinstance(expectation, Expectation):
            raise TypeError(f"'<<' takes an expectation, got {type(expectation).__name__}")
        self.steps.append(expectation)
        return self

    def transcript(self, upto: int | None = None, mark: str = "") -> str:
        lines = []
        for index, step in enumerate(self.steps):
            arrow = ">>" if isinstance(step, Action) else "<<"
            prefix = mark if index == upto else "  "
            lines.append(f"{prefix}{arrow} {step.describe()}")
        return "\n".join(lines)


__all__ = [
    "ABSENT",
    "Action",
    "AdvanceMonotonic",
    "AnswerTools",
    "AtLeast",
    "AtMost",
    "InRange",
    "AwaitCrash",
    "AwaitRelayEvent",
    "AwaitUpstreamEnd",
    "Branch",
    "Chat",
    "ClientGot",
    "Concurrently",
    "Contains",
    "Ctx",
    "CursorTurn",
    "DirectResponses",
    "Disconnect",
    "EchoAs",
    "Edit",
    "Expectation",
    "ExpectationFailed",
    "DeleteGuard",
    "FailWrites",
    "FakeStrict",
    "FillDisk",
    "FreeDisk",
    "Holds",
    "JumpWall",
    "KeepReasoning",
    "KillRelay",
    "Matches",
    "Placeholder",
    "PostRaw",
    "Provider",
    "ReadSlowly",
    "Regenerate",
    "RelayAlive",
    "RelayOptions",
    "RelayReported",
    "ReplayOf",
    "RelayRefusesToStart",
    "RestartRelay",
    "Resume",
    "RotateUpstreamKey",
    "SCREENSHOT",
    "Scenario",
    "Stall",
    "Step",
    "StoreIntegrity",
    "Upstream",
    "UpstreamEnded",
    "UpstreamReceived",
    "WaitFor",
    "default_reply",
    "error_event",
    "http_error",
    "reply",
    "toxics",
]
