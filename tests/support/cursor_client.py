"""Cursor's agent loop with its custom tool: Responses-shaped bodies posted to
``/chat/completions`` (Cursor's field set: ``scenarios.cursor_steps``), Chat
Completions answers read back (streamed chunks or JSON) the way a Chat client accumulates
them, tool calls in either form, and the turn echoed into the next body's ``input``.

Cursor declares ApplyPatch as a custom grammar tool; a custom call may reach it as a
function-type Chat call (the relay's default) or in the Chat API's custom form, and how it
hands the call back is not documented, so the echo is a parameter: ``function_call`` (the
call as the function call it got, its result a ``function_call_output``) or
``custom_tool_call`` (the call as a custom call, its result a ``custom_tool_call_output``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

import requests

from scenarios.cursor_steps import CURSOR_FIELDS, assistant_item
from tests.support.stack import Stack

Echo = Literal["function_call", "custom_tool_call"]

PATCH_GRAMMAR = {
    "type": "grammar",
    "syntax": "lark",
    "definition": 'start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF\n...',
}
READ_TOOL = {
    "type": "function", "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    "strict": False,
}  # fmt: skip
CURSOR_TOOLS: list[dict[str, Any]] = [
    READ_TOOL,
    {"type": "custom", "name": "ApplyPatch", "description": "Edit files with a patch",
     "format": PATCH_GRAMMAR},
]  # fmt: skip
CUSTOM_TOOLS = frozenset({"ApplyPatch"})


def cursor_body(items: list[dict[str, Any]], *, stream: bool) -> dict[str, Any]:
    """The body Cursor 2.5+ sends for a GPT-5-family model (its documented field set)."""
    return {
        "model": "gpt-5",
        "instructions": "You are a coding agent in Cursor.",
        "input": items,
        "tools": CURSOR_TOOLS,
        "tool_choice": "auto",
        "stream": stream,
        **CURSOR_FIELDS,
    }


@dataclass
class Call:
    id: str = ""
    type: str = ""  # "function" or "custom": the form it reached the client in
    name: str = ""
    text: str = ""  # the arguments, or a custom-form call's input


@dataclass
class Turn:
    """What the client was told: text, calls in index order, the finish reason."""

    text: str = ""
    calls: list[Call] = field(default_factory=list)
    finish_reason: str | None = None


def post(stack: Stack, body: dict[str, Any]) -> requests.Response:
    response = requests.post(
        f"{stack.base_url}/chat/completions",
        data=json.dumps(body, ensure_ascii=False).encode(),
        headers=stack.headers(),
        stream=bool(body.get("stream")),
        timeout=30,
    )
    return response


def turn(stack: Stack, body: dict[str, Any]) -> Turn:
    """Send ``body``; the answer as a Chat client reads it (raises on an HTTP error)."""
    response = post(stack, body)
    with response:
        if response.status_code != 200:
            raise AssertionError(f"{response.status_code}: {response.text}")
        if not body.get("stream"):
            return _from_message(response.json()["choices"][0])
        return _from_stream(response)


def _from_message(choice: dict[str, Any]) -> Turn:
    message = choice["message"]
    calls = []
    for call in message.get("tool_calls") or []:
        kind = call["type"]
        text = call["function"]["arguments"] if kind == "function" else call["custom"]["input"]
        name = call[kind]["name"]
        calls.append(Call(call["id"], kind, name, text))
    return Turn(message.get("content") or "", calls, choice["finish_reason"])


def _from_stream(response: requests.Response) -> Turn:
    result = Turn()
    calls: dict[int, Call] = {}
    for line in response.iter_lines():
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[len(b"data: ") :])
        for choice in chunk["choices"]:
            delta = choice["delta"]
            result.text += delta.get("content") or ""
            for piece in delta.get("tool_calls") or []:
                call = calls.setdefault(piece["index"], Call())
                call.id += piece.get("id", "")
                call.type = piece.get("type", call.type)
                part = piece.get("function") or piece.get("custom") or {}
                call.name += part.get("name", "")
                call.text += part.get("arguments", part.get("input", ""))
            result.finish_reason = choice["finish_reason"] or result.finish_reason
    result.calls = [calls[index] for index in sorted(calls)]
    return result


def echo_items(answer: Turn, echo: Echo) -> list[dict[str, Any]]:
    """The turn as Cursor puts it into the next ``input``: its text, then its calls."""
    items: list[dict[str, Any]] = []
    if answer.text:
        items.append(assistant_item(answer.text))
    for call in answer.calls:
        if call.name in CUSTOM_TOOLS and echo == "custom_tool_call":
            items.append({"type": "custom_tool_call", "call_id": call.id, "name": call.name,
                          "input": call.text})  # fmt: skip
        else:
            items.append({"type": "function_call", "call_id": call.id, "name": call.name,
                          "arguments": call.text})  # fmt: skip
    return items


def result_item(call: Call, output: str, echo: Echo) -> dict[str, Any]:
    custom = call.name in CUSTOM_TOOLS and echo == "custom_tool_call"
    kind = "custom_tool_call_output" if custom else "function_call_output"
    return {"type": kind, "call_id": call.id, "output": output}
