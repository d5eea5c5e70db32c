"""A strict thinking-mode Chat provider: its ``reasoning_content`` is restored on the
tool-call turn Cursor sends back without it.

Live: DeepSeek (``DEEPSEEK_API_KEY``) or the provider ``RELAY_LIVE_STRICT_*`` names; the
check is skipped without a key. Offline: the fake's strict Chat endpoint, which answers
HTTP 400 (as DeepSeek does) when the field is missing on a tool-call turn.
"""

from __future__ import annotations

from typing import Any

from live.checks import check
from live.client import Message
from live.context import CheckContext, continuity
from live.conversation import WEATHER_TOOLS, called_cities, tool_result, user
from live.fake_replies import call, say
from live.verdict import Verdict, expect, passed, skipped


@check("strict_provider", "a strict provider's reasoning_content is restored on tool turns")
def strict_provider(ctx: CheckContext) -> Verdict:
    provider = ctx.run.strict
    if provider is None:
        return skipped("no DEEPSEEK_API_KEY (or RELAY_LIVE_STRICT_KEY_ENV key) is set")
    relay = ctx.relay(strict_provider=True)
    chat = ctx.client(relay)
    model = f"{provider.name}/{provider.model}"
    # The provider's own parameters only: no reasoning_effort or output cap.
    params: dict[str, Any] = {"model": model, "tools": WEATHER_TOOLS, "reasoning_effort": None,
              "max_completion_tokens": None}  # fmt: skip
    messages: list[Message] = [
        user("What is the weather in Paris right now? Use the get_weather tool.")
    ]
    asked = chat.chat("call", messages, script=call(("get_weather", {"city": "Paris"})), **params)
    expect(
        called_cities(asked) == ["paris"], f"call: expected one Paris call, got {asked.describe()}"
    )
    # Cursor drops reasoning_content: Turn.message() never carries it.
    messages += [asked.message(), tool_result(asked.tool_calls[0]["id"], "Sunny, 21 C")]
    answered = chat.chat("answer", messages, script=say("Sunny, 21 C in Paris."), **params)
    requests = [f for e, f in relay.events_for(answered.request_id) if e == "chat_provider_request"]
    restored = int(requests[0].get("restored", "0")) if requests else 0
    expect(restored >= 1, f"answer: the relay restored {restored} reasoning_content value(s)")
    hits = relay.stats().get("stats", {}).get("hits", 0)
    expect(hits >= 1, f"/api/cache/reasoning counts {hits} hits")
    if ctx.offline:
        probe = continuity(ctx.calls()[1])
        expect(
            probe.get("exact", 0) >= 1 and probe.get("wrong") == 0,
            f"answer: the provider's probe says {probe}",
        )
    return passed(f"{model}: the tool turn got 200 with {restored} reasoning_content restored")
