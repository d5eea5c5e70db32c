"""Today's Cursor (2.5+, GPT-5-family models): a Responses-shaped body on
``/chat/completions`` with Cursor's whole field set, answered as Chat Completions chunks.

The conversation is kept as Cursor keeps it: each answer echoed back as an assistant
``output_text`` item, the next user turn appended, screenshots as ``input_image`` parts.
These checks prove that OpenAI accepts the replayed blocks of such conversations: a
screenshot conversation across turns (and a second conversation beside it, whose replay
a screenshot once stopped), and an agent loop with the custom grammar tool Cursor edits
files with (``ApplyPatch``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from live.checks import check
from live.client import ChatClient, Turn
from live.context import CheckContext, expect_intact
from live.conversation import expect_word, word
from live.fake_replies import custom_call, say
from live.images import picture
from live.processes import RelayProcess
from live.verdict import CheckFailed, Verdict, expect, passed
from scenarios.cursor_steps import CURSOR_FIELDS, assistant_item, screenshot_part, user_item

INSTRUCTIONS = "You are a coding agent working in the user's editor. Answer tersely."


def cursor_fields(ctx: CheckContext) -> dict[str, Any]:
    """Cursor's field set, with values every GPT-5-family model accepts (``in-memory``
    retention is the default; low effort and the run's output cap keep it cheap)."""
    return {
        **CURSOR_FIELDS,
        "stream": True,
        "prompt_cache_key": f"live-{ctx.name}",
        "prompt_cache_retention": "in-memory",
        "reasoning": {"effort": "low", "summary": "auto"},
        "max_output_tokens": ctx.settings.max_completion_tokens,
    }


@dataclass
class CursorChat:
    """One Cursor conversation through one relay."""

    ctx: CheckContext
    relay: RelayProcess
    name: str
    tools: list[dict[str, Any]] = field(default_factory=list)
    items: list[dict[str, Any]] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    instructions: str = INSTRUCTIONS
    overrides: dict[str, Any] = field(default_factory=dict)  # fields set last

    @property
    def client(self) -> ChatClient:
        return self.ctx.client(self.relay)

    def body(self) -> dict[str, Any]:
        body = {"model": self.ctx.model, "instructions": self.instructions,
                "input": list(self.items), **cursor_fields(self.ctx), **self.overrides}  # fmt: skip
        if self.tools:
            body["tools"] = self.tools
        return body

    def send(self, *items: dict[str, Any], script: Mapping[str, Any]) -> Turn:
        """Append ``items``, post, and echo the answer's text into the history."""
        self.items += items
        turn = self.client.post(f"{self.name}-{len(self.turns) + 1}", self.body(), script=script)
        self.turns.append(turn)
        if turn.text:
            self.items.append(assistant_item(turn.text))
        return turn


@check("cursor_screenshot_replay", "a Cursor screenshot conversation keeps replaying")
def cursor_screenshot_replay(ctx: CheckContext) -> Verdict:
    relay = ctx.relay()
    other = CursorChat(ctx, relay, "plain")
    shot = CursorChat(ctx, relay, "screenshot")
    other.send(user_item("Reply with exactly the word: one"), script=say("one"))
    square = picture("red", "image/png")
    image = screenshot_part(square.data_url, "low")
    question = (
        "What colour is the square in this screenshot? Answer with exactly one word from "
        "this list: red, green, blue."
    )
    first = shot.send(user_item(question, image), script=say("red"))
    expect_word(first, "red")
    # The second conversation replays beside the screenshot (a screenshot used to fence it).
    second = other.send(user_item("Reply with exactly the word: two"), script=say("two"))
    expect_word(second, "two")
    counts = [ctx.expect_replay(relay, second, at_least=1)]
    for n, text in enumerate(("again", "done"), start=2):
        turn = shot.send(user_item(f"Reply with exactly the word: {text}"), script=say(text))
        expect_word(turn, text)
        counts.append(ctx.expect_replay(relay, turn, at_least=n - 1))
    expect(first.tokens is not None, "the stream carried no usage chunk (include_usage)")
    if ctx.offline:
        calls = ctx.calls()
        expect_intact(calls[2], "plain-2")
        expect_intact(calls[-1], "screenshot-3", at_least=2)
        sent = calls[-1].get("body") or {}
        expect("stream_options" not in sent, "stream_options was forwarded upstream")
        expect(sent.get("truncation") == "auto", "truncation was not forwarded")
        images = [p for i in sent.get("input", []) if isinstance(i.get("content"), list)
                  for p in i["content"] if p.get("type") == "input_image"]  # fmt: skip
        expect(images == [image], "the screenshot was not sent as the client sent it")
    return passed(
        f"answered {word(first.text)}; replayed {counts[0]} block(s) in the other "
        f"conversation and {counts[1]}, {counts[2]} in the screenshot one"
    )


# Cursor's file-editing tool: a custom tool whose input is a patch in a Lark grammar (a
# small subset of Cursor's: one file added, so any model can follow it).
PATCH_GRAMMAR = r"""
start: "*** Begin Patch" LF "*** Add File: " PATH LF LINE+ "*** End Patch" LF?
PATH: /[A-Za-z0-9_.\/-]+/
LINE: "+" /[^\n]*/ LF
LF: "\n"
"""
APPLY_PATCH = {
    "type": "custom",
    "name": "ApplyPatch",
    "description": "Edit files. The input is a patch: '*** Begin Patch', '*** Add File: "
    "<path>', the file's lines each starting with '+', then '*** End Patch'.",
    "format": {"type": "grammar", "syntax": "lark", "definition": PATCH_GRAMMAR},
}
READ_FILE = {
    "type": "function", "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"]},
    "strict": False,
}  # fmt: skip
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch\n"


def echo_call(call: dict[str, Any], echo: str) -> dict[str, Any]:
    """The call as Cursor hands it back (undocumented, so both ways are checked)."""
    function = call["function"]
    if echo == "custom_tool_call":
        return {"type": "custom_tool_call", "call_id": call["id"], "name": function["name"],
                "input": function["arguments"]}  # fmt: skip
    return {"type": "function_call", "call_id": call["id"], "name": function["name"],
            "arguments": function["arguments"]}  # fmt: skip


@check("cursor_apply_patch_loop", "a Cursor agent loop with the ApplyPatch grammar tool replays")
def cursor_apply_patch_loop(ctx: CheckContext) -> Verdict:
    relay = ctx.relay()
    notes = []
    for echo in ("function_call", "custom_tool_call"):
        chat = CursorChat(ctx, relay, f"patch-{echo}", tools=[READ_FILE, APPLY_PATCH])
        ask = user_item(
            "Create the file hello.txt containing the single line: hello. Call the "
            "ApplyPatch tool now; do not answer in text."
        )
        first = chat.send(ask, script=custom_call("ApplyPatch", PATCH))
        calls = [c for c in first.tool_calls if c["function"]["name"] == "ApplyPatch"]
        if first.finish_reason != "tool_calls" or not calls:
            raise CheckFailed(f"{echo}: the model made no ApplyPatch call ({first.describe()})")
        patch = calls[0]["function"]["arguments"]
        expect(patch.startswith("*** Begin Patch"), f"{echo}: the patch was respelled: {patch!r}")
        output = "custom_tool_call_output" if echo == "custom_tool_call" else "function_call_output"
        results = [echo_call(call, echo) for call in first.tool_calls]
        results += [{"type": output if call in calls else "function_call_output",
                     "call_id": call["id"], "output": "Done."} for call in first.tool_calls]  # fmt: skip
        second = chat.send(
            *results,
            user_item("The patch was applied. Reply with exactly the word: applied"),
            script=say("applied"),
        )
        expect_word(second, "applied")
        counts = [ctx.expect_replay(relay, second, at_least=1)]
        third = chat.send(
            user_item("Reply with exactly the word: finished"), script=say("finished")
        )
        expect_word(third, "finished")
        counts.append(ctx.expect_replay(relay, third, at_least=2))
        if ctx.offline:
            calls_made = ctx.calls()
            sent = calls_made[-2].get("body") or {}
            kinds = [item.get("type") for item in sent.get("input", [])]
            expect("custom_tool_call" in kinds and "custom_tool_call_output" in kinds,
                   f"{echo}: the upstream got {kinds}, not the custom call and its output")  # fmt: skip
            expect_intact(calls_made[-2], f"{echo}-2")
            expect_intact(calls_made[-1], f"{echo}-3", at_least=2)
        notes.append(f"{echo} echo replayed {counts[0]} then {counts[1]}")
    return passed("; ".join(notes))
