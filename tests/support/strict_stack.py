"""The relay in front of strict thinking-mode Chat providers (tests/support/stack.py's
providers): the provider table, and one completion read the way Cursor keeps it (content
and tool calls, ``reasoning_content`` dropped)."""

from __future__ import annotations

from typing import Any

from tests.support.stack import Stack

PROVIDERS: dict[str, dict[str, Any]] = {
    "deepseek": {"kind": "chat"},  # deepseek-chat: tool-call turns, "" on a miss
    "together": {"kind": "chat"},  # a gateway: every turn once tools are present
    "plain": {"kind": "chat", "strict": False},  # an OpenAI-like Chat upstream
    "custom": {"kind": "chat", "strict": True},  # no row names it: forced
    "mirror": {"kind": "responses"},  # another Responses upstream
}
TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}},
]


def turn(stack: Stack, model: str, messages: list[Any], *, stream: bool,
         tools: list[Any] | None = TOOLS) -> dict[str, Any]:  # fmt: skip
    """One completion, as the assistant message Cursor appends (reasoning dropped); the
    reasoning it was shown is under ``_reasoning``."""
    extra: dict[str, Any] = {"tools": tools} if tools else {}
    with stack.openai() as client:
        if not stream:
            completion = client.chat.completions.create(model=model, messages=messages, **extra)
            assert completion.model == model  # echoed as the client named it
            message: dict[str, Any] = completion.choices[0].message.model_dump(exclude_none=True)
            message["_reasoning"] = message.pop("reasoning_content", "")
            return message
        content, reasoning = "", ""
        calls: dict[int, dict[str, Any]] = {}
        for chunk in client.chat.completions.create(
            model=model, messages=messages, stream=True, **extra
        ):
            assert chunk.model == model
            for choice in chunk.choices:
                reasoning += (choice.delta.model_extra or {}).get("reasoning_content") or ""
                content += choice.delta.content or ""
                for call in choice.delta.tool_calls or []:
                    slot = calls.setdefault(
                        call.index, {"type": "function", "function": {"name": "", "arguments": ""}}
                    )
                    slot["id"] = call.id or slot.get("id")
                    if call.function is not None:
                        slot["function"]["name"] += call.function.name or ""
                        slot["function"]["arguments"] += call.function.arguments or ""
    message = {"role": "assistant", "content": content or None, "_reasoning": reasoning}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message
