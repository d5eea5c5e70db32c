"""Tool chains: the blocks that called tools replay when their results come back."""

from __future__ import annotations

from live.checks import check
from live.client import Message
from live.context import CheckContext, expect_intact
from live.conversation import WEATHER_TOOLS, called_cities, tool_result, user, word
from live.fake_replies import call, say
from live.verdict import Verdict, expect, passed

WEATHER = {"paris": "Sunny, 21 C", "tokyo": "Rain, 15 C"}


@check("tool_chain_single", "a tool call, its result and a follow-up, replayed along the chain")
def tool_chain_single(ctx: CheckContext) -> Verdict:
    relay = ctx.relay()
    chat = ctx.client(relay)
    messages: list[Message] = [
        user("What is the weather in Paris right now? Use the get_weather tool.")
    ]
    asked = chat.chat(
        "call", messages, tools=WEATHER_TOOLS, script=call(("get_weather", {"city": "Paris"}))
    )
    expect(asked.finish_reason == "tool_calls", f"call: finish={asked.finish_reason}, no tool call")
    expect(called_cities(asked) == ["paris"], f"call: cities {called_cities(asked)}")
    messages += [asked.message(), tool_result(asked.tool_calls[0]["id"], WEATHER["paris"])]
    answered = chat.chat(
        "answer", messages, tools=WEATHER_TOOLS, script=say("It is sunny and 21 C in Paris.")
    )
    first = ctx.expect_replay(relay, answered)
    expect("21" in answered.text, f"answer: the tool result is missing: {answered.text[:80]!r}")
    messages += [answered.message(), user("Which city did I ask about? Answer with one word.")]
    followed = chat.chat(
        "follow-up", messages, tools=WEATHER_TOOLS, stream=True, script=say("Paris")
    )
    second = ctx.expect_replay(relay, followed, at_least=2)
    expect(word(followed.text) == "paris", f"follow-up: answered {followed.text[:60]!r}")
    if ctx.offline:
        calls = ctx.calls()
        expect_intact(calls[1], "answer", at_least=1)
        expect_intact(calls[2], "follow-up", at_least=2)
    return passed(f"the result turn replayed {first} block(s), the follow-up {second}")


@check("tool_chain_parallel", "parallel tool calls in one block, replayed with both results")
def tool_chain_parallel(ctx: CheckContext) -> Verdict:
    relay = ctx.relay()
    chat = ctx.client(relay)
    messages: list[Message] = [
        user("Get the current weather for Paris and for Tokyo with the get_weather tool: "
             "call it once per city, both calls in this one turn.")
    ]  # fmt: skip
    asked = chat.chat(
        "calls", messages, tools=WEATHER_TOOLS, parallel_tool_calls=True,
        script=call(("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Tokyo"})),
    )  # fmt: skip
    cities = called_cities(asked)
    expect(sorted(cities) == ["paris", "tokyo"], f"calls: expected Paris and Tokyo, got {cities}")
    messages.append(asked.message())
    for tool_call, city in zip(asked.tool_calls, cities, strict=True):
        messages.append(tool_result(tool_call["id"], WEATHER[city]))
    answered = chat.chat(
        "answer", messages, tools=WEATHER_TOOLS, parallel_tool_calls=True, stream=True,
        script=say("Paris: sunny, 21 C. Tokyo: rain, 15 C."),
    )  # fmt: skip
    replayed = ctx.expect_replay(relay, answered)
    expect(
        "21" in answered.text and "15" in answered.text,
        f"answer: a tool result is missing: {answered.text[:100]!r}",
    )
    if ctx.offline:
        expect_intact(ctx.calls()[1], "answer")
    return passed(f"{len(cities)} parallel calls; the result turn replayed {replayed} block(s)")
