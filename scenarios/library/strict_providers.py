"""Strict thinking-mode Chat providers (DeepSeek, Kimi, gateways) through real processes.

The fake's ``/v1/chat/completions`` signs every ``reasoning_content`` it mints for the
visible message it answered and reports, per request, ``continuity: restored=N exact=N
wrong=N missing=N``; its rule (``FakeStrict``) decides which turns must carry it back.
The scenario client drops ``reasoning_content`` from its history as Cursor does (unless
``KeepReasoning``), so every ``exact`` below was put back by the relay. The history check
``no_wrong_restore`` judges every run: nothing restored that the fake did not mint for
that very message.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from scenarios.dsl import (
    ABSENT,
    AnswerTools,
    Chat,
    ClientGot,
    Contains,
    EchoAs,
    FakeStrict,
    InRange,
    JumpWall,
    KeepReasoning,
    KillRelay,
    Matches,
    PostRaw,
    Provider,
    Regenerate,
    RelayAlive,
    RelayOptions,
    RelayReported,
    RestartRelay,
    Resume,
    Scenario,
    Upstream,
    UpstreamReceived,
    error_event,
    http_error,
    reply,
)
from scenarios.library import scenario
from scenarios.seed import Seed
from scenarios.steps import TOOLS

DEEPSEEK = "deepseek/deepseek-chat"
KIMI = "moonshot/kimi-k2-thinking"
V4 = "opencode-go/deepseek-v4-flash"  # a gateway serving a DeepSeek V4 model
GATEWAY = "together/Qwen3-235B-A22B-Thinking-2507"
PROVIDERS = tuple(Provider(name) for name in ("deepseek", "moonshot", "opencode-go", "together"))
ON = RelayOptions(cache_enabled=True, providers=(*PROVIDERS, Provider("plain", strict=False)))
OFF = replace(ON, cache_enabled=False)
DEEPSEEK_400 = "The reasoning_content in the thinking mode must be passed back to the API."
INDEXED_400 = "Missing `reasoning_content` field in the assistant message at message index 1."
KIMI_400 = (
    "thinking is enabled but reasoning_content is missing in assistant tool call message at index 1"
)
SIGNED = Matches(r" #[0-9a-f]{24}$")  # a reasoning_content as the fake mints it


def probe(exact: int, wrong: int = 0, missing: int = 0) -> dict[str, int]:
    """The fake's Chat continuity counts of one request."""
    return {"restored": exact + wrong, "exact": exact, "wrong": wrong, "missing": missing}


def line(exact: int, missing: int = 0) -> Contains:
    """The continuity line the fake's default answer carries."""
    return Contains(f"continuity: restored={exact} exact={exact} wrong=0 missing={missing}")


def next_call(seed: Seed, hop: int) -> dict[str, Any]:
    """A scripted answer to a tool result: more thinking, another call (seeded path)."""
    path = f"src/{seed.choice(f'file@{hop}', ['a', 'b', 'util', 'main'])}.py"
    return reply(reasoning=[f"Hop {hop}: read {path} next."],
                 calls=[("read_file", json.dumps({"path": path}))])  # fmt: skip


def streamed(seed: Seed, turn: str) -> bool:
    return seed.choice(f"stream@{turn}", ["sse", "json"]) == "sse"


def foreign(model: str) -> bytes:
    """A history with a tool call the relay never saw (no record can exist for it)."""
    call = {"id": "call_never_seen_by_relay", "type": "function",
            "function": {"name": "read_file", "arguments": "{}"}}  # fmt: skip
    messages = [{"role": "user", "content": "CALL_TOOL"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": call["id"], "content": "x"}]  # fmt: skip
    return json.dumps({"model": model, "messages": messages, "tools": TOOLS}).encode()


@scenario()
def strict_tool_chain_needs_the_cache(seed: Seed) -> Scenario:
    """DeepSeek rule, the same tool chain twice. Cache off: the follow-up gets the
    provider's own 400 unchanged (nothing filled in). Cache on: a seeded chain of 2-4
    tool calls succeeds, every earlier reasoning_content back exactly (wrong=0, missing=0)."""
    hops = seed.randint("hops", 2, 4)
    s = Scenario("strict_tool_chain_needs_the_cache", relay=OFF)
    s >> Chat("CALL_TOOL read the config", model=DEEPSEEK, tools=True, name="off1")
    s << ClientGot("off1", outcome="success", finish_reason="tool_calls")
    s >> AnswerTools("config: see src", name="off2", stream=streamed(seed, "off2"))
    s << ClientGot("off2", status=400, error_message=DEEPSEEK_400, done=False)
    s << UpstreamReceived("off2", reasoning={1: ABSENT}, continuity=probe(0, missing=1))
    s >> RestartRelay(cache=True)
    s >> Chat("CALL_TOOL read the config", conv="on", model=DEEPSEEK, tools=True, name="on0")
    for hop in range(1, hops + 1):
        s >> Upstream(next_call(seed, hop))
        s >> AnswerTools(
            f"result {hop}", conv="on", name=f"on{hop}", stream=streamed(seed, f"on{hop}")
        )
        s << ClientGot(f"on{hop}", outcome="success", finish_reason="tool_calls")
        s << UpstreamReceived(f"on{hop}", continuity=probe(hop), reasoning={2 * hop - 1: SIGNED})
    s >> AnswerTools("all read", conv="on", name="last", stream=streamed(seed, "last"))
    s << ClientGot("last", outcome="success", text=line(hops + 1))
    s << RelayReported("chat_provider_request", fields={"restored": str(hops + 1), "missed": "0"})
    s << RelayAlive()
    return s


@scenario()
def strict_plain_turns_every_turn_rule(seed: Seed) -> Scenario:
    """A gateway that checks every assistant turn once tools are present (together):
    plain text turns carry no tool-call id, so only the history identity finds them
    (echoed as a string or as text parts, seeded); all are restored, around one seeded
    tool call."""
    turns = seed.randint("turns", 3, 5)
    tool_at = seed.randint("tool_at", 0, turns - 1)
    s = Scenario("strict_plain_turns_every_turn_rule", relay=ON)
    s >> FakeStrict("all_turns_with_tools")
    answered = 0
    for k in range(turns):
        ask = f"CALL_TOOL look {k}" if k == tool_at else f"plain question {k}"
        s >> Chat(ask, model=GATEWAY, tools=True, name=f"p{k}", stream=streamed(seed, f"p{k}"))
        s << UpstreamReceived(f"p{k}", continuity=probe(answered))
        answered += 1
        if k == tool_at:
            s >> AnswerTools("seen", name=f"p{k}r", stream=streamed(seed, f"p{k}r"))
            s << ClientGot(f"p{k}r", outcome="success", text=line(answered))
            answered += 1
        else:
            s << ClientGot(f"p{k}", outcome="success", text=line(answered - 1))
            form = seed.choice(f"echo@{k}", ["string", "parts"])  # both hash as one text
            s >> EchoAs(form, split=seed.randint(f"split@{k}", 0, 8) if form == "parts" else None)
    s << RelayReported("chat_provider_request", fields={"provider": "together", "missed": "0",
                                                        "restored": str(answered - 1)})  # fmt: skip
    s << RelayAlive()
    return s


@scenario()
def strict_restore_survives_kill(seed: Seed) -> Scenario:
    """kill -9 between turns (cache on): the restarted relay restores from disk, first a
    tool-call turn, then a longer chain after a second (seeded: kill or graceful) restart,
    then after a kill mid-stream (seeded event) the regeneration; the in-memory layer's
    size is seeded (0, 1 or 2000 entries)."""
    memory = seed.choice("memory_entries", ["0", "1", "2000"])  # 0: every lookup on disk
    relay = replace(ON, extra_env=(("REASONING_CACHE_STRICT_MEMORY_ENTRIES", memory),))
    s = Scenario("strict_restore_survives_kill", relay=relay)
    s >> Chat("CALL_TOOL read a.txt", model=DEEPSEEK, tools=True, name="t1")
    s >> RestartRelay(kill=True)
    s >> AnswerTools("a.txt: see b.txt", name="t2", stream=streamed(seed, "t2"))
    s << UpstreamReceived("t2", continuity=probe(1, missing=0), reasoning={1: SIGNED})
    s << ClientGot("t2", outcome="success", text=line(1))
    s >> Chat("CALL_TOOL read b.txt", name="t3", tools=True, stream=streamed(seed, "t3"))
    s >> Upstream(next_call(seed, 1))
    s >> AnswerTools("b.txt: see c.txt", name="t4")
    s >> RestartRelay(kill=seed.choice("second", ["kill", "stop"]) == "kill")
    s >> AnswerTools("c.txt: done", name="t5", stream=streamed(seed, "t5"))
    s << UpstreamReceived("t5", continuity=probe(3, missing=1))
    s << ClientGot("t5", outcome="success", text=line(3, missing=1))
    s << RelayReported("chat_provider_request", fields={"restored": "3", "missed": "0"})
    s >> Upstream(reply("a long summary " * 40, reasoning=["sum up"], deltas=60, latency_ms=5))
    s >> Chat("summarize", name="t6", tools=True, hold=1)
    s >> KillRelay(after_upstream_events=seed.randint("kill_after_events", 5, 50))
    s >> Resume("t6")
    s << ClientGot("t6", outcome="cut", done=False)
    s >> RestartRelay()
    s >> Regenerate(name="t7", stream=streamed(seed, "t7"))
    s << ClientGot("t7", outcome="success", text=line(3, missing=2))
    s << RelayAlive()
    return s


@scenario(needs=("faketime",))
def strict_record_expires_after_ttl(seed: Seed) -> Scenario:
    """TTL 60 s, wall-clock jumps (libfaketime): within the TTL a hit slides it (on disk:
    a kill -9 follows), so 60+ s after capture it is still restored; a jump past it
    (seeded, up to days) makes a miss: the DeepSeek rule's "" fill (never invented text)
    and the provider's 400."""
    first = seed.randint("first_jump", 25, 40)
    second = seed.randint("second_jump", 65 - first, 50)  # past capture + TTL, not last use
    beyond = abs(seed.clock_jump("beyond", 61, 3 * 86_400))
    s = Scenario("strict_record_expires_after_ttl", clock="wall",
                 relay=replace(ON, strict_ttl_s=60))  # fmt: skip
    s >> Chat("CALL_TOOL read a.txt", model=DEEPSEEK, tools=True, name="t1")
    s >> JumpWall(first)
    s >> AnswerTools("a.txt: 42", name="t2", stream=streamed(seed, "t2"))
    s << UpstreamReceived("t2", continuity=probe(1), reasoning={1: SIGNED})
    s >> RestartRelay(kill=True)  # the slid expiry must be on disk, not only in memory
    s >> JumpWall(second)
    s >> Chat("and now?", name="t3", tools=True, stream=streamed(seed, "t3"))
    s << ClientGot("t3", outcome="success", text=line(1, missing=1))
    s >> JumpWall(beyond)
    s >> Chat("after the jump", name="t4", tools=True, stream=streamed(seed, "t4"))
    s << ClientGot("t4", status=400, error_message=DEEPSEEK_400)
    s << UpstreamReceived("t4", reasoning={1: "", 3: ABSENT}, continuity=probe(0, 1, 2))
    s << RelayReported("strict_record_refused", fields={"reason": "record_expired"})
    s << RelayAlive()
    return s


@scenario()
def strict_stripped_for_non_strict_upstreams(seed: Seed) -> Scenario:
    """A client that keeps reasoning_content (unlike Cursor) talks to a `strict: false`
    provider and to legacy deepseek-reasoner (the fake rejects any sent field): the relay
    strips it, the fake sees none (restored=0) and accepts. Cache on or off (seeded)."""
    cache = seed.choice("cache", ["on", "off"]) == "on"
    s = Scenario("strict_stripped_for_non_strict_upstreams", relay=replace(ON, cache_enabled=cache))
    s >> FakeStrict("legacy_rejects")
    for conv, model in (("plain", "plain/gpt-4o"), ("legacy", "deepseek/deepseek-reasoner")):
        s >> Chat("CALL_TOOL look", conv=conv, model=model, tools=True, name=f"{conv}1")
        s << ClientGot(f"{conv}1", outcome="success", finish_reason="tool_calls")
        s >> KeepReasoning(conv)
        s >> AnswerTools("seen", conv=conv, name=f"{conv}2", stream=streamed(seed, conv))
        s << UpstreamReceived(f"{conv}2", reasoning={1: ABSENT}, continuity=probe(0, missing=1))
        s >> KeepReasoning(conv)
        s >> Chat("and?", conv=conv, name=f"{conv}3", stream=streamed(seed, f"{conv}3"))
        s << ClientGot(f"{conv}3", outcome="success", text=line(0, missing=2))
    s << RelayReported("chat_provider_request", fields={"stripped": "1"}, count=2)
    s << RelayReported("chat_provider_request", fields={"stripped": "2"}, count=2)
    s << RelayAlive()
    return s


@scenario()
def strict_kimi_and_indexed_variants(seed: Seed) -> Scenario:
    """Kimi's rule and the index-naming DeepSeek variant (via a gateway, seeded "Param
    Incorrect: " wrapping): cache on, two-call chains succeed with exact reasoning; a
    history the relay never saw gets the provider's index-naming 400, nothing invented."""
    prefix = seed.choice("prefix", ["plain", "wrapped"]) == "wrapped"
    s = Scenario("strict_kimi_and_indexed_variants", relay=ON)
    cases = (("kimi", KIMI, KIMI_400), ("tool_turns_indexed", V4, INDEXED_400))
    for rule, model, rejection in cases:
        s >> FakeStrict(rule, prefix=prefix)
        s >> Chat("CALL_TOOL read a.txt", conv=rule, model=model, tools=True, name=f"{rule}1")
        s >> Upstream(next_call(seed, 1))
        s >> AnswerTools("a.txt: b", conv=rule, name=f"{rule}2", stream=streamed(seed, rule))
        s >> AnswerTools("b: done", conv=rule, name=f"{rule}3")
        s << ClientGot(f"{rule}3", outcome="success", text=line(2))
        s >> PostRaw(foreign(model), name=f"{rule}-foreign")
        text = ("Param Incorrect: " if prefix else "") + rejection
        s << ClientGot(f"{rule}-foreign", status=400, error_message=text)
    s << UpstreamReceived("kimi-foreign", reasoning={1: ABSENT}, continuity=probe(0, 0, 1))
    s << UpstreamReceived("tool_turns_indexed-foreign", reasoning={1: ""})
    s << RelayAlive()
    return s


# The relay refuses these itself; the others go to the provider, which decides.
REFUSED = ("no_messages", "user_not_a_string", "not_json")
BAD_BODIES: dict[str, Any] = {
    "no_messages": {"model": DEEPSEEK, "input": "hi"},
    "messages_not_objects": {"model": DEEPSEEK, "messages": [1, "x", None]},
    "tool_calls_not_a_list": {
        "model": DEEPSEEK,
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": "x"},
            {"role": "user", "content": "again"},
        ],
    },
    "odd_tool_calls": {
        "model": DEEPSEEK,
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}, 7]},
            {
                "role": "assistant",
                "content": [None],
                "tool_calls": [None, {"id": 5}, {"id": ""}],
                "reasoning_content": 123,
            },
            {"role": "tool", "tool_call_id": None},
        ],
    },
    "user_not_a_string": {"model": DEEPSEEK, "user": 5, "messages": [{"role": "user"}]},
    "not_json": '{"model": "deepseek/deepseek-chat", "messages": [',
}


@scenario()
def strict_bad_input_and_failures(seed: Seed) -> Scenario:
    """A provider 500, an error frame and a cut stream are failures to the client (no
    [DONE]) that record nothing, and the conversation then goes on with exact restores;
    malformed Chat bodies (seeded order) get the relay's own 400 or the provider's answer,
    never a crash."""
    s = Scenario("strict_bad_input_and_failures", relay=ON)
    s >> Chat("CALL_TOOL read a.txt", model=DEEPSEEK, tools=True, name="t1")
    failures = (
        http_error(500, "provider down"),
        error_event("overloaded", after_events=3),
        reply(None, reasoning=["cut"], calls=[("read_file", "{}")], cut_after_events=4),
    )
    for k, script in enumerate(failures):
        s >> Upstream(script)
        again = Chat(None, name=f"fail{k}", tools=True, stream=k > 0 or streamed(seed, "fail0"))
        s >> (AnswerTools("a.txt: 1", name=f"fail{k}", stream=again.stream) if k == 0 else again)
        s << ClientGot(f"fail{k}", outcome="error", done=False)
        s << UpstreamReceived(f"fail{k}", continuity=probe(1), reasoning={1: SIGNED})
    s << RelayReported("strict_captured", count=1)  # t1's answer only
    s >> Chat(None, name="ok", tools=True, stream=streamed(seed, "ok"))
    s << ClientGot("ok", outcome="success", text=line(1))
    s << RelayReported("strict_captured", count=2)
    order = sorted(BAD_BODIES, key=lambda name: seed.randint(f"order@{name}", 0, 999))
    for name in order:
        body = BAD_BODIES[name]
        s >> PostRaw(body.encode() if isinstance(body, str) else json.dumps(body).encode(),
                     name=name)  # fmt: skip
        s << ClientGot(name, status=400 if name in REFUSED else InRange(200, 499))
    s << RelayAlive()
    return s
