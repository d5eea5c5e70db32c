"""Today's Cursor as a scenario client: GPT-5-family models get a Responses-shaped body
(``input`` items, ``instructions``, flat tools and Cursor's field set) posted to
``/chat/completions``, and the answer comes back as Chat Completions.

The conversation is kept in Chat form like every other (so ``AnswerTools``-style steps,
``Branch`` and the checker's history model see one kind of history) and written as
Cursor writes it on each turn: the answer echoed as an assistant ``output_text`` item and
its calls as ``function_call`` items, tool results as ``function_call_output`` items,
screenshots as ``input_image`` parts.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from scenarios.core import Action, Ctx, ExpectationFailed, resolve
from scenarios.steps import DEFAULT_MODEL, TOOLS, post_turn

# A real (1x1) PNG: a screenshot as Cursor attaches it, as a data URL.
SCREENSHOT = "data:image/png;base64," + base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
        "0000000d49444154789c63f8cfc0f01f0005000201e2215bc60000000049454e44ae426082"
    )
).decode("ascii")

# What Cursor 2.5+ sends beside model/input/instructions/tools (stream set per turn).
# Shared with the live checks and the integration tests: one statement of the shape.
CURSOR_FIELDS: dict[str, Any] = {
    "store": False,
    "include": ["reasoning.encrypted_content"],
    "truncation": "auto",
    "prompt_cache_retention": "24h",
    "prompt_cache_key": "scenario-cursor-session",
    "reasoning": {"effort": "medium", "summary": "auto"},
    "text": {"verbosity": "low"},
    "stream_options": {"include_usage": True},
}


def user_item(text: str, *parts: dict[str, Any]) -> dict[str, Any]:
    """A user turn as Cursor writes it: its text, then any image parts."""
    return {"role": "user", "content": [{"type": "input_text", "text": text}, *parts]}


def assistant_item(text: str) -> dict[str, Any]:
    """An answer echoed back as Cursor writes it."""
    part = {"type": "output_text", "text": text, "annotations": []}
    return {"type": "message", "role": "assistant", "content": [part]}


def screenshot_part(url: str = SCREENSHOT, detail: str = "auto") -> dict[str, Any]:
    return {"type": "input_image", "image_url": url, "detail": detail}


# Cursor's file-editing tool: a custom tool with a Lark grammar (its patch format, cut).
APPLY_PATCH: dict[str, Any] = {
    "type": "custom",
    "name": "ApplyPatch",
    "description": "Edit files with a patch",
    "format": {
        "type": "grammar",
        "syntax": "lark",
        "definition": 'start: "*** Begin Patch" LF hunk+ "*** End Patch" LF?\n...',
    },
}


def flat_tools() -> list[dict[str, Any]]:
    """The scenario tools as Responses (flat) function tools, and ApplyPatch."""
    functions = [{"type": "function", **tool["function"], "strict": False} for tool in TOOLS]
    return [*functions, APPLY_PATCH]


def cursor_input(
    messages: list[dict[str, Any]], *, custom_echo: bool = False
) -> tuple[str | None, list[dict[str, Any]]]:
    """(instructions, input items) for a Chat-form conversation, as Cursor writes them.
    A call of ApplyPatch reached the client as a function-type call; how Cursor hands it
    back is not documented: as that ``function_call`` (and a ``function_call_output``),
    or with ``custom_echo`` as a ``custom_tool_call`` (and a ``custom_tool_call_output``)."""
    instructions = None
    items: list[dict[str, Any]] = []
    custom_ids: set[str] = set()
    for message in messages:
        role = message["role"]
        if role in ("system", "developer") and not items:
            instructions = str(message["content"])
        elif role == "assistant":
            if message.get("content"):
                items.append(assistant_item(message["content"]))
            for call in message.get("tool_calls") or []:
                function = call["function"]
                name, arguments = function["name"], function["arguments"]
                if custom_echo and name == APPLY_PATCH["name"]:
                    custom_ids.add(call["id"])
                    items.append({"type": "custom_tool_call", "call_id": call["id"],
                                  "name": name, "input": arguments})  # fmt: skip
                    continue
                items.append({"type": "function_call", "call_id": call["id"], "name": name,
                              "arguments": arguments})  # fmt: skip
        elif role == "tool":
            call_id = message["tool_call_id"]
            kind = "custom_tool_call_output" if call_id in custom_ids else "function_call_output"
            items.append({"type": kind, "call_id": call_id, "output": message["content"]})
        else:
            items.append({"role": role, "content": _input_parts(message["content"])})
    return instructions, items


def _input_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    parts = []
    for part in content:
        if part["type"] == "text":
            parts.append({"type": "input_text", "text": part["text"]})
        else:
            image = part["image_url"]
            parts.append(screenshot_part(image["url"], image.get("detail", "auto")))
    return parts


@dataclass
class CursorTurn(Action):
    """A turn as today's Cursor sends it. ``text`` is the user's message (``None``: the
    history as it stands), ``screenshot`` a data URL attached to it as an image part,
    ``tool_results`` answers every call of the last answer first (one result each, in
    call order); ``tools`` offers the scenario's function tool and ApplyPatch (Cursor
    sends its tools on every turn: they are scope, so a conversation keeps one setting);
    ``custom_echo`` hands ApplyPatch calls back as custom calls (see :func:`cursor_input`)."""

    text: str | None = None
    conv: str = "main"
    name: str | None = None
    stream: bool = True
    screenshot: str | None = None
    tool_results: list[str] = field(default_factory=list)
    tools: bool = True
    custom_echo: bool = False

    def run(self, ctx: Ctx) -> None:
        history = ctx.history_of(self.conv)
        if self.tool_results:
            last = history[-1] if history else {}
            calls = last.get("tool_calls") or []
            if len(calls) != len(self.tool_results):
                raise ExpectationFailed(
                    f"CursorTurn: {len(self.tool_results)} results for {len(calls)} calls"
                )
            for call, result in zip(calls, self.tool_results, strict=True):
                history.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        if self.text is not None:
            content: list[dict[str, Any]] = [{"type": "text", "text": self.text}]
            if self.screenshot is not None:
                url = {"url": self.screenshot, "detail": "auto"}
                content.append({"type": "image_url", "image_url": url})
            history.append({"role": "user", "content": content})
        model = ctx.models[self.conv] = ctx.models.get(self.conv, DEFAULT_MODEL)
        instructions, items = cursor_input(resolve(list(history)), custom_echo=self.custom_echo)
        body: dict[str, Any] = {"model": model, "input": items, "stream": self.stream,
                                **CURSOR_FIELDS}  # fmt: skip
        if instructions is not None:
            body["instructions"] = instructions
        if self.tools:
            body["tools"] = flat_tools()
        post_turn(ctx, self.name, self.conv, body)
