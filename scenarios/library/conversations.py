"""Conversation moves a chat client makes: tool calls and answers, edits of earlier
history, regeneration, concurrent conversations. With the cache off, the upstream must
get exactly the visible history and never a replayed reasoning item."""

from __future__ import annotations

from scenarios.dsl import (
    AnswerTools,
    Chat,
    ClientGot,
    Concurrently,
    Contains,
    Edit,
    Placeholder,
    Regenerate,
    RelayAlive,
    Scenario,
    UpstreamReceived,
)
from scenarios.library import scenario
from scenarios.seed import Seed


@scenario()
def conversation_moves(seed: Seed) -> Scenario:
    """Tool call → tool answer (call id captured and checked), edit of the first message,
    regenerate, and two conversations at once."""
    call_id = Placeholder("call_id")
    width = seed.randint("concurrency", 2, 4)
    s = Scenario("conversation_moves")
    s >> Chat("please CALL_TOOL now", tools=True, name="t1")
    s << ClientGot(finish_reason="tool_calls", tool_call_id=call_id)
    s >> AnswerTools("42", name="t2", call_id=call_id)
    s << ClientGot(outcome="success", text=Contains("Tool output: 42"))
    s << UpstreamReceived(replayed=[], continuity={"replayed": 0})
    s >> Edit(0, "an edited first message", name="t3")
    s << ClientGot(outcome="success", text=Contains("Echo: an edited first message"))
    s >> Regenerate(name="t3b", stream=False)
    s << ClientGot(outcome="success", text=Contains("Echo: an edited first message"))
    s >> Concurrently(*(Chat(f"side {i}", conv=f"c{i}", name=f"c{i}") for i in range(width)))
    for i in range(width):
        s << ClientGot(f"c{i}", outcome="success", text=Contains(f"Echo: side {i}"))
    s << RelayAlive()
    return s
