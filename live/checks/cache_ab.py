"""What replay buys, measured: the same scripted Cursor-shaped agent session (a long system
prompt past the 1,024-token caching threshold, ``read_file`` and the ApplyPatch grammar
tool, 10 requests) through a relay with the reasoning cache on, then through one with it
off, each in a prompt-cache partition of its own (its own ``prompt_cache_key`` and a
different first line of the instructions, so neither arm warms the other's cache).

Reported for each arm: the share of input tokens served from the prompt cache (turns 2
on: the first is cold in both), reasoning tokens, output tokens and wall time. The check
fails only when the session itself fails, or when the cache-on arm did not replay; live,
the shares are a measurement, not a pass mark (a model's answers differ between arms).
Offline, the fake's prompt cache (fakeupstream/prompt_cache.py) must show the on arm's
share above the off arm's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Final

from live.checks import check
from live.checks.cursor_agent import APPLY_PATCH, READ_FILE, CursorChat, echo_call
from live.client import Turn
from live.context import CheckContext
from live.fake_replies import call, custom_call, say
from live.verdict import CheckFailed, Verdict, expect, passed
from scenarios.cursor_steps import user_item

TURNS: Final = 10  # requests per arm
_RULES: Final = (
    "Read a file before you change it; never guess at code you have not seen.",
    "Prefer the smallest edit that does the job, and keep the file's existing style.",
    "Create or edit files only with the ApplyPatch tool, never by printing their contents.",
    "When a tool result surprises you, read more before you act on it.",
    "Answer in one short sentence once the task is done; no summaries of the tools used.",
    "Never print secrets, tokens or credentials, even when a file you read contains them.",
)
# About 1,100 tokens, the tools another 200: every request's prefix passes OpenAI's 1,024-token caching threshold.
BODY: Final = "\n".join(
    f"Rule {n}: {rule} This holds for every file in the workspace: source, tests, "
    f"configuration and documentation alike (rule {n} of the house style)."
    for n, rule in enumerate(_RULES * 6, start=1)
)
README: Final = "# Demo\n\nA workspace for the agent session. Notes go under notes/.\n"
TASKS: Final = (
    ("notes/a.txt", "alpha"),
    ("notes/b.txt", "bravo"),
    ("notes/c.txt", "charlie"),
    ("notes/d.txt", "delta"),
)


def instructions(arm: str) -> str:
    # The arm first: the two arms' prompts differ from their first token on.
    return f"Session {arm}. You are a coding agent working in the user's editor.\n{BODY}"


def patch(path: str, word: str) -> str:
    return f"*** Begin Patch\n*** Add File: {path}\n+{word}\n*** End Patch\n"


def ask(task: int) -> dict[str, Any]:
    path, word = TASKS[task % len(TASKS)]
    return user_item(
        f"Read README.md with read_file, then create {path} containing the single line "
        f"{word} with the ApplyPatch tool, then reply with exactly the word: done"
    )


def scripts(turn: int) -> dict[str, Any]:
    """What the fake model does at ``turn`` (offline): read, patch, answer, in a cycle."""
    task, step = divmod(turn, 3)
    path, word = TASKS[task % len(TASKS)]
    if step == 0:
        return call(("read_file", {"path": "README.md"}))
    if step == 1:
        return custom_call("ApplyPatch", patch(path, word))
    return say("done")


@dataclass
class Arm:
    name: str
    turns: list[Turn] = field(default_factory=list)
    seconds: float = 0.0
    replayed: list[int] = field(default_factory=list)

    def total(self, what: str, *, skip_first: bool = False) -> int:
        turns = self.turns[1:] if skip_first else self.turns
        return sum(getattr(t.usage, what) for t in turns if t.usage is not None)

    @property
    def cached_share(self) -> float:
        prompt = self.total("prompt", skip_first=True)
        return self.total("cached", skip_first=True) / prompt if prompt else 0.0

    def summary(self) -> str:
        return (
            f"cache {self.name}: cached {self.cached_share:.1%} of "
            f"{self.total('prompt', skip_first=True)} input tokens (turns 2-{len(self.turns)}), "
            f"reasoning {self.total('reasoning')}, output {self.total('output')}, "
            f"{self.seconds:.1f} s"
        )


def tool_results(turn: Turn) -> list[dict[str, Any]]:
    """The calls echoed back as Cursor does (ApplyPatch as a custom call), then each one's
    result."""
    calls, outputs = [], []
    for c in turn.tool_calls:
        custom = c["function"]["name"] == "ApplyPatch"
        calls.append(echo_call(c, "custom_tool_call" if custom else "function_call"))
        kind = "custom_tool_call_output" if custom else "function_call_output"
        outputs.append({"type": kind, "call_id": c["id"], "output": "Done." if custom else README})
    return calls + outputs


def play(ctx: CheckContext, arm: str) -> Arm:
    """One arm: a relay with the cache ``arm`` ("on"/"off") and the whole session."""
    relay = ctx.relay(f"cache-{arm}", env={"REASONING_CACHE_ENABLED": "1" if arm == "on" else "0"})
    chat = CursorChat(
        ctx, relay, f"ab-{arm}", tools=[READ_FILE, APPLY_PATCH],
        instructions=instructions(arm),
        overrides={"prompt_cache_key": f"live-{ctx.name}-{arm}-{ctx.settings.seed}"},
    )  # fmt: skip
    result = Arm(arm)
    pending: list[dict[str, Any]] = [ask(0)]
    task = 0
    started = time.monotonic()
    for turn_index in range(TURNS):
        turn = chat.send(*pending, script=scripts(turn_index))
        result.turns.append(turn)
        if turn.usage is None:
            raise CheckFailed(f"{turn.label}: the stream carried no usage chunk")
        if arm == "on" and turn_index > 0:
            result.replayed.append(ctx.expect_replay(relay, turn, at_least=1))
        if turn.tool_calls:
            pending = tool_results(turn)
        else:
            task += 1
            pending = [ask(task)]
    result.seconds = time.monotonic() - started
    return result


@check("cache_ab", "the same Cursor session with the cache on and off: what replay buys")
def cache_ab(ctx: CheckContext) -> Verdict:
    on = play(ctx, "on")
    off = play(ctx, "off")
    expect(len(on.replayed) == TURNS - 1, "the cache-on arm did not replay on every turn")
    if ctx.offline:
        expect(
            on.cached_share > off.cached_share,
            f"replay did not raise the cached share: {on.summary()}; {off.summary()}",
        )
    return passed(f"{on.summary()}; {off.summary()}")
