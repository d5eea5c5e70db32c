"""The reasoning replay cache across restarts, scopes and failures: committed blocks
survive restarts; credentials, callers and models never see each other's blocks; the
authoritative ciphertext is the one replayed; a cache-off relay replays nothing; and a
position where unknown output was generated never replays.

Shared helpers (``CACHE``, ``chain``, ``echo``, ``intact``) are in
:mod:`scenarios.library.replay`.
"""

from __future__ import annotations

import json
from typing import Any

from scenarios.core import Ctx
from scenarios.dsl import (
    AwaitCrash,
    Branch,
    Chat,
    ClientGot,
    Holds,
    Matches,
    Regenerate,
    RelayOptions,
    RelayReported,
    RestartRelay,
    Scenario,
    Upstream,
    UpstreamReceived,
    error_event,
    reply,
)
from scenarios.faults.crash import arm
from scenarios.library import scenario
from scenarios.library.replay import CACHE, chain, echo, intact
from scenarios.seed import Seed

ALIASES = {"same": "gpt-5", "deep": {"model": "gpt-5", "reasoning_effort": "high"}}
ISOLATION = RelayOptions(
    cache_enabled=True,
    idle_timeout_ms=1000,
    extra_env=(("RELAY_MODEL_ALIASES", json.dumps(ALIASES)),),
)
TEXT = "The quick brown fox jumps over the lazy dog."
DELTAS = 8  # reasoning, then a text of 8 deltas (events 7-14); the terminal event is 18


def _done_tokens(ctx: Ctx, turn: str) -> list[Any]:
    """What the reasoning items of ``turn``'s output_item.done events carried."""
    call = ctx.upstream_of(ctx.turn(turn))[-1]
    items = [e["data"].get("item") or {} for e in call["events"]]
    return [i.get("encrypted_content") for i in items if i.get("type") == "reasoning"]


def _final_tokens(ctx: Ctx, turn: str) -> list[Any]:
    call = ctx.upstream_of(ctx.turn(turn))[-1]
    return [i.get("encrypted_content") for i in call["output"] if i["type"] == "reasoning"]


def _differ(ctx: Ctx) -> bool:
    done, final = _done_tokens(ctx, "differ"), _final_tokens(ctx, "differ")
    return len(done) == len(final) == 1 and isinstance(done[0], str) and done != final


@scenario()
def replay_survives_restarts(seed: Seed) -> Scenario:
    """kill -9 and a graceful stop between turns (order from the seed), cache on both
    times: every block admitted before a restart replays after it; nothing is lost."""
    kills = [seed.choice("first_stop", ["kill", "stop"]) == "kill"]
    kills.append(not kills[0])
    s = Scenario("replay_survives_restarts", relay=CACHE)
    s >> Chat("before any restart", name="t0")
    for k, kill in enumerate(kills, start=1):
        s >> RestartRelay(kill=kill)
        stream = seed.choice(f"mode@{k}", ["sse", "json"]) == "sse"
        s >> Chat(f"after restart {k}", name=f"t{k}", stream=stream)
        s << ClientGot(outcome="success", text=echo(f"after restart {k}", k))
        s << UpstreamReceived(replayed=chain(*[f"t{j}" for j in range(k)]), continuity=intact(k))
    s >> Regenerate(name="t2b")  # the newest position is now contested, the rest is not
    s >> RestartRelay(kill=True)
    s >> Chat("last", name="t3")
    s << UpstreamReceived(replayed=chain("t0", "t1"), continuity=intact(2))
    return s


@scenario(needs=("crash_points",))
def replay_lost_only_with_an_unconfirmed_delivery(seed: Seed) -> Scenario:
    """kill -9 after the client read a whole JSON answer, before the relay resolved its
    intent: recovery poisons that position (the answer does not replay, and the checker's
    nothing-lost accepts it), while the block confirmed before the crash still replays."""
    s = Scenario("replay_lost_only_with_an_unconfirmed_delivery", relay=CACHE)
    s >> Chat("first", name="t1", stream=seed.choice("mode", ["sse", "json"]) == "sse")
    s >> RestartRelay(crash_at=arm("after_terminal_frame"), kill=True)
    s >> Chat("second", name="t2", stream=False)
    s >> AwaitCrash()
    s << ClientGot("t2", outcome="success", text=echo("second", 1))  # all of it, yet...
    s << UpstreamReceived("t2", replayed=chain("t1"), continuity=intact(1))
    s >> RestartRelay(crash_at=None)
    s << RelayReported("cache_opened", fields={"recovered_intents": "1"})
    s >> Chat("third", name="t3")
    s << UpstreamReceived(replayed=chain("t1"), continuity=intact(1))
    s << ClientGot(text=echo("third", 1))
    s << RelayReported("cache_plan", fields={"rejected": Matches("start_poisoned")})
    return s


@scenario()
def replay_isolated_by_credential(seed: Seed) -> Scenario:
    """The same visible history under another upstream key replays nothing (and the
    block is not lost: back under the first key it replays again)."""
    s = Scenario("replay_isolated_by_credential", relay=CACHE)
    s >> Chat("hello", name="t1")
    s >> Chat("more", name="t2")
    s << UpstreamReceived(replayed=chain("t1"), continuity=intact(1))
    s >> RestartRelay(credential=1, kill=seed.choice("kill", ["yes", "no"]) == "yes")
    s >> Branch("t1")
    s >> Chat("more", name="other_key", stream=False)
    s << UpstreamReceived(replayed=[], continuity=intact(0))
    s << ClientGot(text=echo("more", 0))
    s >> RestartRelay(credential=0)
    s >> Branch("other_key")  # this history's answer came from the other key's scope
    s >> Chat("and then?", name="mixed")
    s << UpstreamReceived(replayed=chain("t1"), continuity=intact(1))
    s >> Branch("t1")
    s >> Chat("more", name="back")
    s << UpstreamReceived(replayed=chain("t1"), continuity=intact(1))
    return s


@scenario()
def replay_isolated_by_caller_and_model(seed: Seed) -> Scenario:
    """One visible history, sent by another caller (``user``), by no caller, for another
    model and for an alias with other reasoning settings: no replay for any of them. An
    alias that resolves to the same model and settings shares the scope and replays."""
    alice = {"user": f"alice-{seed.randint('alice', 1, 999)}"}
    others = {
        "bob": {"user": "bob"},
        "anonymous": {},
        "o3": {**alice, "model": "o3"},
        "deep": {**alice, "model": "deep"},
    }
    s = Scenario("replay_isolated_by_caller_and_model", relay=ISOLATION)
    s >> Chat("hello", name="t1", extra=alice)
    s >> Chat("more", name="t2", extra=alice)
    s << UpstreamReceived(replayed=chain("t1"), continuity=intact(1))
    for name, extra in others.items():
        s >> Branch("t1", conv=name)
        s >> Chat("more", conv=name, name=name, extra=extra)
        s << UpstreamReceived(replayed=[], continuity=intact(0))
        s << ClientGot(text=echo("more", 0))
    s >> Branch("t1", conv="alias")
    s >> Chat("more", conv="alias", name="alias", extra={**alice, "model": "same"})
    s << UpstreamReceived(replayed=chain("t1"), continuity=intact(1))
    return s


@scenario()
def replay_authoritative_ciphertext(seed: Seed) -> Scenario:
    """Ciphertext that differs between output_item.done and response.completed, or that
    only response.completed carries: admitted, and replayed with the completed bytes."""
    modes = [seed.choice(f"mode@{k}", ["sse", "json"]) == "sse" for k in range(2)]
    s = Scenario("replay_authoritative_ciphertext", relay=CACHE)
    s >> Upstream({**reply("Differs", reasoning=["r"]), "ciphertext": "differ"})
    s >> Chat("one", name="differ", stream=modes[0])
    s << ClientGot(outcome="success", text="Differs")
    s << Holds("output_item.done and response.completed carried different ciphertext", _differ)
    s >> Upstream({**reply("Completed only", reasoning=["r"]), "ciphertext": "completed_only"})
    s >> Chat("two", name="completed_only", stream=modes[1])
    s << Holds(
        "output_item.done carried no ciphertext",
        lambda ctx: _done_tokens(ctx, "completed_only") == [None],
    )
    s >> Chat("three", name="after")
    s << UpstreamReceived(replayed=chain("differ", "completed_only"), continuity=intact(2))
    s << ClientGot(text=echo("three", 2))
    s << RelayReported("cache_observed", count=3, fields={"outcome": "admitted"})
    return s


@scenario()
def replay_off_is_the_probe_control(seed: Seed) -> Scenario:
    """The control for the probe: the history that replays with the cache on goes out
    plain with the cache off (no reasoning item, the caller's store/include untouched),
    and the fake's continuity line says replayed=0."""
    s = Scenario("replay_off_is_the_probe_control", relay=CACHE)
    s >> Chat("hello", name="t1")
    s >> Chat("more", name="on")
    s << UpstreamReceived(replayed=chain("t1"), continuity=intact(1))
    s << ClientGot(text=echo("more", 1))
    s >> RestartRelay(cache=False, kill=seed.choice("kill", ["yes", "no"]) == "yes")
    s >> Branch("t1")
    s >> Chat("more", name="off", stream=seed.choice("mode", ["sse", "json"]) == "sse")
    s << UpstreamReceived(replayed=[], continuity=intact(0))
    s << ClientGot(text=echo("more", 0))
    s << Holds(
        "no store/include added with the cache off",
        lambda ctx: not {"store", "include"} & set(ctx.upstream_of(ctx.turn("off"))[0]["body"]),
    )
    return s


@scenario()
def replay_never_after_a_coverage_gap(seed: Seed) -> Scenario:
    """A cache-off period is a coverage gap (design §7): generations made while off were
    never observed (here a regeneration with the same visible text), so once re-enabled
    the relay must not replay blocks recorded before the gap."""
    s = Scenario("replay_never_after_a_coverage_gap", relay=CACHE)
    s >> Chat("hello", name="t1")
    s >> RestartRelay(cache=False, kill=seed.choice("kill", ["yes", "no"]) == "yes")
    s >> Regenerate(name="unobserved")
    s << ClientGot(text=echo("hello", 0))  # the same text as t1's, other reasoning
    s >> RestartRelay(cache=True)
    s >> Chat("more", name="after_gap")
    s << UpstreamReceived(replayed=[], continuity=intact(0))
    s << RelayReported("cache_plan", fields={"rejected": Matches("stale_generation")})
    return s


@scenario()
def replay_poisoned_by_a_cut(seed: Seed) -> Scenario:
    """A regeneration cut mid-stream poisons its position: neither the earlier answer
    there nor the cut one's partial text replays; the position before it still does."""
    cut = seed.randint("cut_event", 7, DELTAS + 9)  # after the first delta, before the end
    s = Scenario("replay_poisoned_by_a_cut", relay=CACHE)
    s >> Chat("first", name="t1")
    s >> Upstream(reply(TEXT, reasoning=["r"], deltas=DELTAS))
    s >> Chat("second", name="t2", stream=seed.choice("mode", ["sse", "json"]) == "sse")
    s >> Upstream(reply(TEXT, reasoning=["r"], deltas=DELTAS, cut_after_events=cut))
    s >> Regenerate(name="cut")
    s << ClientGot("cut", outcome="error", done=False)
    s << RelayReported("cache_poisoned")
    for kept in ("t2", "cut"):  # the earlier full answer, then the partial text
        s >> Branch(kept)
        s >> Chat("and then?", name=f"after_{kept}")
        s << UpstreamReceived(replayed=chain("t1"), continuity=intact(1))
        s << ClientGot(text=echo("and then?", 1))
    return s


@scenario()
def replay_poisoned_by_failures(seed: Seed) -> Scenario:
    """An error event, a failed response and an incomplete one (whose truncated text the
    client keeps, finish ``length``) each poison their position: no replay there."""
    text = reply(TEXT, reasoning=["r"], deltas=DELTAS)
    after = seed.randint("error_after", 3, DELTAS + 9)
    failures = {
        "error_event": {**text, **error_event("boom", after_events=after)},
        "failed": {**text, "status": "failed"},
        "incomplete": {**text, "status": "incomplete"},
    }
    s = Scenario("replay_poisoned_by_failures", relay=CACHE)
    for name, failure in failures.items():
        s >> Chat(f"ask {name}", conv=name, name=f"{name}_ok")
        s >> Upstream(failure)
        s >> Regenerate(conv=name, name=name, stream=seed.choice(name, ["sse", "json"]) == "sse")
        if name == "incomplete":  # a success for the client, which keeps the text
            s << ClientGot(outcome="success", finish_reason="length", text=TEXT)
            s >> Chat("and then?", conv=name, name="after_truncated")
            s << UpstreamReceived(replayed=[], continuity=intact(0))
        else:
            s << ClientGot(outcome="error")
        s >> Branch(f"{name}_ok")  # the answer the position had before it was poisoned
        s >> Chat("and then?", conv=name, name=f"{name}_after")
        s << UpstreamReceived(replayed=[], continuity=intact(0))
    s << RelayReported("cache_observed", count=1, fields={"outcome": "poisoned"})
    s << RelayReported("cache_plan", count=3, fields={"rejected": Matches("start_poisoned")})
    return s
