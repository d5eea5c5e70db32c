"""Today's Cursor (Responses-shaped bodies on ``/chat/completions``, GPT-5-family models):
a session with screenshots and tool calls keeps replaying, relay restarts included.

Input indices are those of the Chat scenarios (``replay.py``): ``instructions`` are not
an item, a user turn is one item and a replayed text answer two, so block ``j`` of a
plain chat sits at index ``3 * j + 1``.
"""

from __future__ import annotations

from scenarios.dsl import (
    SCREENSHOT,
    AwaitRelayEvent,
    ClientGot,
    Contains,
    Ctx,
    CursorTurn,
    Holds,
    Placeholder,
    RelayReported,
    RestartRelay,
    Scenario,
    UpstreamReceived,
)
from scenarios.library import scenario
from scenarios.library.replay import CACHE, chain, intact
from scenarios.seed import Seed


def replays(*turns: str) -> UpstreamReceived:
    """The turn replayed exactly these turns' blocks, in place, and the fake found them
    intact: each turn before a block adds three items (a user turn or a tool result, then
    the block's reasoning and its answer or call), so block ``j`` sits at ``3 * j + 1``."""
    return UpstreamReceived(replayed=chain(*turns), continuity=intact(len(turns)))


def custom_call_sent(turn: str) -> Holds:
    """The upstream got the ApplyPatch call and its result as a custom call and a custom
    output (the relay sends a custom call's items in their own kind)."""

    def check(ctx: Ctx) -> bool:
        items = ctx.upstream_of(ctx.turn(turn))[-1]["body"]["input"]
        kinds = [i.get("type") for i in items]
        return "custom_tool_call" in kinds and kinds[-1] == "custom_tool_call_output"

    return Holds(f"{turn} sends the ApplyPatch call and result as custom items", check)


def screenshot_sent(turn: str, count: int) -> Holds:
    """The turn's upstream input carries ``count`` screenshots, exactly as the client sent
    them (the relay never rewrites an image part)."""

    def check(ctx: Ctx) -> bool:
        items = ctx.upstream_of(ctx.turn(turn))[-1]["body"]["input"]
        parts = [p for i in items if isinstance(i.get("content"), list) for p in i["content"]]
        images = [p for p in parts if p.get("type") == "input_image"]
        return (
            images == [{"type": "input_image", "image_url": SCREENSHOT, "detail": "auto"}] * count
        )

    return Holds(f"{turn} sends {count} screenshot(s) upstream as sent", check)


@scenario()
def cursor_session_across_restarts(seed: Seed) -> Scenario:
    """A Cursor agent session: a screenshot, a function call and its result, an ApplyPatch
    (custom grammar tool) call handed back as a custom call, a second screenshot, user
    turns, two relay restarts (graceful, then kill -9 once the last answer was
    confirmed). Every turn replays every earlier block in place (the fake finds them
    intact), the screenshots reach the upstream as sent, and nothing fences."""
    s = Scenario("cursor_session_across_restarts", relay=CACHE)
    stream = seed.choice("call_stream", ["sse", "json"]) == "sse"
    s >> CursorTurn("what is wrong on this screen?", screenshot=SCREENSHOT, name="shot")
    s << ClientGot(outcome="success", text=Contains("continuity: replayed=0"))
    s << replays()
    s >> CursorTurn("please CALL_TOOL to read the file", name="call", stream=stream)
    s << ClientGot(finish_reason="tool_calls", tool_call_id=Placeholder("call_id"))
    s << replays("shot")
    s >> RestartRelay()  # graceful: SIGTERM
    s >> CursorTurn(tool_results=["file body"], name="result")
    s << replays("shot", "call")
    # Cursor's file edit: a call of the ApplyPatch grammar tool, handed back as a custom call.
    s >> CursorTurn("please CALL_CUSTOM to fix it", name="patch")
    s << ClientGot(finish_reason="tool_calls")
    s << replays("shot", "call", "result")
    s >> CursorTurn(tool_results=["Done."], custom_echo=True, name="patched")
    s << replays("shot", "call", "result", "patch")
    s << custom_call_sent("patched")
    # Confirmed (chat_done follows the intent's resolution), so a kill -9 loses nothing.
    s >> AwaitRelayEvent("chat_done")
    s >> RestartRelay(kill=True)
    s >> CursorTurn("another screenshot", screenshot=SCREENSHOT, name="shot2", custom_echo=True)
    s << replays("shot", "call", "result", "patch", "patched")
    s << screenshot_sent("shot2", 2)
    s >> CursorTurn("thanks", name="after", stream=False, custom_echo=True)
    s << ClientGot(outcome="success", text=Contains("continuity: replayed=6 intact=6"))
    s << replays("shot", "call", "result", "patch", "patched", "shot2")
    s << RelayReported("cache_fenced", count=0)
    return s
