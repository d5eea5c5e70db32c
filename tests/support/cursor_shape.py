"""Today's Cursor traffic for GPT-5-family models: a Responses-shaped body posted to
``/chat/completions``, answered in Chat Completions form (streamed or JSON).

The body carries Cursor's field set (``store``, ``include``, ``truncation``, the prompt
cache fields, ``reasoning``, ``text``, ``stream_options``; the shape itself is
``scenarios.cursor_steps``); the conversation is kept as Cursor keeps it: the answer
echoed back as an assistant ``output_text`` item, screenshots as ``input_image`` parts.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import requests

from scenarios.cursor_steps import CURSOR_FIELDS, assistant_item
from tests.support.stack import Stack

CONTINUITY = re.compile(r"continuity: replayed=(\d+) intact=(\d+) misplaced=(\d+)")
READ_TOOL = {
    "type": "function", "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    "strict": False,
}  # fmt: skip


def cursor_fields(*, stream: bool) -> dict[str, Any]:
    """Everything Cursor sends beside ``model``/``input``/``instructions``/``tools``."""
    return {"stream": stream, **CURSOR_FIELDS}


@dataclass
class Answer:
    text: str
    tool_calls: list[dict[str, Any]]
    finish_reason: str | None
    usage: dict[str, Any] | None

    @property
    def continuity(self) -> tuple[int, int, int]:
        match = CONTINUITY.search(self.text)
        assert match, self.text
        replayed, intact, misplaced = (int(g) for g in match.groups())
        return replayed, intact, misplaced


def post(stack: Stack, body: dict[str, Any]) -> Answer:
    """POST a Cursor-shaped body; the Chat answer, streamed chunks folded together."""
    answer = requests.post(
        f"{stack.base_url}/chat/completions", json=body, headers=stack.headers(), timeout=30
    )
    assert answer.status_code == 200, answer.text
    if not body.get("stream"):
        choice = answer.json()["choices"][0]
        message = choice["message"]
        return Answer(message.get("content") or "", message.get("tool_calls") or [],
                      choice["finish_reason"],
                      answer.json().get("usage"))  # fmt: skip
    text, finish, usage = [], None, None
    calls: dict[int, dict[str, Any]] = {}
    for line in answer.text.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        usage = chunk.get("usage") or usage
        for choice in chunk["choices"]:
            delta = choice["delta"]
            text.append(delta.get("content") or "")
            finish = choice.get("finish_reason") or finish
            for call in delta.get("tool_calls") or []:
                into = calls.setdefault(call["index"], {"id": None, "name": "", "arguments": ""})
                into["id"] = call.get("id") or into["id"]
                function = call.get("function") or {}
                into["name"] += function.get("name") or ""
                into["arguments"] += function.get("arguments") or ""
    found = [{"id": c["id"], "type": "function",
              "function": {"name": c["name"], "arguments": c["arguments"]}}
             for _, c in sorted(calls.items())]  # fmt: skip
    return Answer("".join(text), found, finish, usage)


@dataclass
class Conversation:
    """One Cursor chat: its items grow by each answer and the next user turn."""

    instructions: str = "You are a coding agent in the user's editor."
    items: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=lambda: [READ_TOOL])

    def body(self, *, stream: bool) -> dict[str, Any]:
        return {"model": "gpt-5", "instructions": self.instructions, "input": list(self.items),
                "tools": self.tools, **cursor_fields(stream=stream)}  # fmt: skip

    def turn(self, stack: Stack, user: dict[str, Any], *, stream: bool = True) -> Answer:
        """Send the next user item; the answer is echoed into the history."""
        self.items.append(user)
        answer = post(stack, self.body(stream=stream))
        self.items.append(assistant_item(answer.text))
        return answer
