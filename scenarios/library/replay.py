"""The reasoning replay cache across the conversation shapes a chat client produces: each
earlier answer's original block (encrypted reasoning included) replaces its visible
assistant message at exactly its place, and nowhere else.

Input indices: the relay sends a user message as one item and a replayed text answer as
two (reasoning, message), so in a plain chat block ``j`` sits at index ``3 * j + 1``. The
fake's default reply ends with its continuity probe, ``continuity: replayed=N intact=N
misplaced=0``, so the client text shows what the fake saw, too.
"""

from __future__ import annotations

from typing import Any

from scenarios.core import Ctx
from scenarios.dsl import (
    AnswerTools,
    Branch,
    Chat,
    ClientGot,
    EchoAs,
    Edit,
    Holds,
    Matches,
    Placeholder,
    Regenerate,
    RelayOptions,
    RelayReported,
    ReplayOf,
    Scenario,
    Upstream,
    UpstreamReceived,
    reply,
)
from scenarios.library import scenario
from scenarios.seed import Seed

CACHE = RelayOptions(cache_enabled=True, idle_timeout_ms=1000)


def intact(n: int) -> dict[str, int]:
    """The fake's continuity report when ``n`` replayed items all sit where minted."""
    return {"replayed": n, "intact": n, "misplaced": 0, "invalid": 0}


def echo(text: str, n: int, lead: str = "Echo") -> str:
    """The fake's default answer to ``text`` when ``n`` replayed items were all intact."""
    return f"{lead}: {text}\ncontinuity: replayed={n} intact={n} misplaced=0"


def chain(*turns: str, step: int = 3) -> list[ReplayOf]:
    """Blocks of consecutive user/answer pairs: ``turns[j]`` at index ``step * j + 1``."""
    return [ReplayOf(turn, at=step * j + 1) for j, turn in enumerate(turns)]


def tool_results(turn: str, expected: list[str]) -> Holds:
    """The turn's upstream input carries the client's tool results unchanged: the same
    call ids and outputs, in the same order, as the client's tool messages."""

    def check(ctx: Ctx) -> bool:
        sent = [
            (m["tool_call_id"], m["content"])
            for m in ctx.turn(turn).body["messages"]
            if m.get("role") == "tool"
        ]
        items: list[dict[str, Any]] = ctx.upstream_of(ctx.turn(turn))[-1]["body"]["input"]
        results = [i for i in items if i.get("type") == "function_call_output"]
        got = [(i["call_id"], i["output"]) for i in results]
        return got == sent and [output for _, output in got] == expected

    return Holds(f"{turn}'s tool results reach the upstream untouched: {expected}", check)


@scenario()
def replay_multi_turn_mixed_modes(seed: Seed) -> Scenario:
    """Streamed and JSON turns, mixed by the seed: turn k replays every one of the k
    earlier blocks, each in place of its own answer, and the fake finds all k intact."""
    s = Scenario("replay_multi_turn_mixed_modes", relay=CACHE)
    names: list[str] = []
    for k in range(seed.randint("turns", 3, 5)):
        stream = seed.choice(f"mode@{k}", ["sse", "json"]) == "sse"
        s >> Chat(f"question {k}", name=f"q{k}", stream=stream)
        s << ClientGot(outcome="success", text=echo(f"question {k}", k))
        s << UpstreamReceived(replayed=chain(*names), continuity=intact(k))
        names.append(f"q{k}")
    s << RelayReported("cache_observed", count=len(names), fields={"outcome": "admitted"})
    return s


@scenario()
def replay_tool_call_chain(seed: Seed) -> Scenario:
    """A call, a second call after its result, a final answer, a new question: each turn
    replays every earlier block (calls included) in place; tool results stay untouched."""
    call_id = Placeholder("call_id")
    path = f"src/{seed.randint('file', 1, 999)}.py"
    s = Scenario("replay_tool_call_chain", relay=CACHE)
    s >> Chat("please CALL_TOOL", tools=True, name="call1")
    s << ClientGot(finish_reason="tool_calls", tool_call_id=call_id)
    s >> Upstream(reply(reasoning=["again"], calls=[("read_file", f'{{"path":"{path}"}}')]))
    s >> AnswerTools("first result", name="call2", call_id=call_id)
    s << ClientGot(finish_reason="tool_calls")
    s << UpstreamReceived(replayed=chain("call1"), continuity=intact(1))
    s >> AnswerTools("second result", name="final")
    s << ClientGot(text=echo("second result", 2, lead="Tool output"))
    s << UpstreamReceived(replayed=chain("call1", "call2"), continuity=intact(2))
    s << tool_results("final", ["first result", "second result"])
    s >> Chat("thanks", tools=True, name="after")
    s << ClientGot(text=echo("thanks", 3))
    s << UpstreamReceived(replayed=chain("call1", "call2", "final"), continuity=intact(3))
    s << tool_results("after", ["first result", "second result"])
    return s


@scenario()
def replay_parallel_tool_calls(seed: Seed) -> Scenario:
    """One answer with two parallel calls: the next turn replays the whole block (both
    calls after their reasoning) before the two results, which stay untouched."""
    files = [f"{name}{seed.randint(name, 1, 99)}.py" for name in ("a", "b")]
    calls = [("read_file", f'{{"path":"{name}"}}') for name in files]
    s = Scenario("replay_parallel_tool_calls", relay=CACHE)
    s >> Upstream(reply(reasoning=["both files"], calls=calls))
    s >> Chat("read both files", tools=True, name="calls", stream=False)
    s << ClientGot(finish_reason="tool_calls")
    s << Holds("one answer, two calls", lambda c: len(c.history_of("main")[-1]["tool_calls"]) == 2)
    s >> AnswerTools(["A", "B"], name="answered")
    s << ClientGot(text=echo("B", 1, lead="Tool output"))
    s << UpstreamReceived(replayed=[ReplayOf("calls", at=1)], continuity=intact(1))
    s << tool_results("answered", ["A", "B"])
    s >> Chat("thanks", tools=True, name="after")
    s << UpstreamReceived(
        replayed=[ReplayOf("calls", at=1), ReplayOf("answered", at=6)], continuity=intact(2)
    )
    s << tool_results("after", ["A", "B"])
    return s


@scenario()
def replay_skips_conflicting_regeneration(seed: Seed) -> Scenario:
    """A regeneration with the same visible text but new ciphertext is a conflict: later
    turns send that answer as plain text, yet still replay the blocks before it and the
    blocks generated after it (which were made without it)."""
    s = Scenario("replay_skips_conflicting_regeneration", relay=CACHE)
    s >> Chat("first", name="t1")
    s >> Chat("second", name="t2", stream=seed.choice("mode", ["sse", "json"]) == "sse")
    s >> Regenerate(name="t2b", stream=seed.choice("regen_mode", ["sse", "json"]) == "sse")
    s << ClientGot("t2b", text=echo("second", 1))  # the very text t2 got
    s << UpstreamReceived("t2b", replayed=chain("t1"), continuity=intact(1))
    s >> Chat("third", name="t3")
    s << ClientGot(text=echo("third", 1))
    s << UpstreamReceived(replayed=chain("t1"), continuity=intact(1))
    s << RelayReported("cache_plan", fields={"rejected": Matches("end_conflict")})
    s >> Chat("fourth", name="t4")
    s << UpstreamReceived(replayed=[ReplayOf("t1", at=1), ReplayOf("t3", at=6)])
    s << ClientGot(text=echo("fourth", 2))
    return s


@scenario()
def replay_regenerated_versions_on_their_branches(seed: Seed) -> Scenario:
    """A regeneration with different text is no conflict: continuing from version A
    replays A's block, continuing from version B replays B's, each on its own branch."""
    first, second = ("A", "B") if seed.choice("order", ["AB", "BA"]) == "AB" else ("B", "A")
    s = Scenario("replay_regenerated_versions_on_their_branches", relay=CACHE)
    s >> Upstream(reply("Version A", reasoning=["a"]), reply("Version B", reasoning=["b"]))
    s >> Chat("pick one", name="A")
    s >> Regenerate(name="B", stream=False)
    s << ClientGot("B", text="Version B")
    for version in (first, second):
        s >> Branch(version)
        s >> Chat("go on", name=f"on_{version}")
        s << ClientGot(text=echo("go on", 1))
        s << UpstreamReceived(replayed=chain(version), continuity=intact(1))
    s >> Branch(f"on_{first}")
    s >> Chat("deeper", name="deeper")
    s << UpstreamReceived(replayed=chain(first, f"on_{first}"), continuity=intact(2))
    return s


@scenario()
def replay_stops_at_an_edit(seed: Seed) -> Scenario:
    """Editing an earlier user message: nothing at or after the edit replays, even an
    answer with the very same text there; blocks before the edit still replay."""
    s = Scenario("replay_stops_at_an_edit", relay=CACHE)
    s >> Upstream(reply("q0 answer", reasoning=["r"]), reply("Same answer", reasoning=["r"]))
    s >> Chat("q0", name="t0")
    s >> Chat("q1", name="t1")
    s >> Chat("q2", name="t2", stream=False)
    s << UpstreamReceived(replayed=chain("t0", "t1"), continuity=intact(2))
    s >> Upstream(reply("Same answer", reasoning=["r"]))  # as t1 said, after another q1
    s >> Edit(1, f"q1, edited {seed.randint('edit', 1, 99)}", name="edited")
    s << UpstreamReceived(replayed=chain("t0"), continuity=intact(1))
    s >> Chat("after the edit", name="after")
    s << UpstreamReceived(replayed=chain("t0", "edited"), continuity=intact(2))
    s << ClientGot(text=echo("after the edit", 2))
    s >> Edit(0, "q0, edited", name="edited0", stream=False)
    s << UpstreamReceived(replayed=[], continuity=intact(0))
    return s


@scenario()
def replay_every_assistant_envelope_form(seed: Seed) -> Scenario:
    """The answer echoed back as a string, as text parts (split where the seed says), and
    a tool-call answer with null, empty-string or absent content: each replays."""
    s = Scenario("replay_every_assistant_envelope_form", relay=CACHE)
    for form in ("string", "parts"):
        s >> Chat(f"say it as {form}", conv=form, name=form)
        s >> EchoAs(form, conv=form, split=seed.randint("split", 0, 30))
        s >> Chat("and then?", conv=form, name=f"{form}_next")
        s << UpstreamReceived(replayed=chain(form), continuity=intact(1))
        s << ClientGot(text=echo("and then?", 1))
    for form in ("null", "empty", "absent"):
        s >> Chat(f"CALL_TOOL for {form}", conv=form, name=form, tools=True)
        s >> EchoAs(form, conv=form)
        s >> AnswerTools(f"{form} result", conv=form, name=f"{form}_next")
        s << UpstreamReceived(replayed=chain(form), continuity=intact(1))
        s << ClientGot(text=echo(f"{form} result", 1, lead="Tool output"))
    return s
