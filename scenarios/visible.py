"""The visible projection of Responses input/output: what a chat client could see.

Pure functions over JSON. A request's ``input`` becomes a list of *segments*: each user,
system/developer and tool-output item is one segment, and each run of consecutive
assistant-side items (assistant messages, function and custom tool calls, refusals —
reasoning items are invisible and skipped) is one ``assistant`` segment holding the
concatenated text, the refusal and the calls. That mirrors Chat Completions, where one
assistant message carries a whole response (a preamble and the answer, text and tool
calls together).

The checker compares these projections; they never look at ids or ciphertext.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

Segment = tuple[Any, ...]

# Request fields that make one generation's context differ from another's (the "scope").
SCOPE_KEYS = (
    "model",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning",
    "text",
    "max_output_tokens",
    "user",
    "safety_identifier",
)


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def text_of(content: Any) -> tuple[str, str]:
    """(text, refusal) of a message's content in any of its forms."""
    if isinstance(content, str):
        return content, ""
    text, refusal = [], []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("refusal"), str):
            refusal.append(part["refusal"])
        elif isinstance(part.get("text"), str):
            text.append(part["text"])
        elif part.get("type") in ("input_image", "image_url"):
            text.append("\0image:" + canonical(part.get("image_url")))
    return "".join(text), "".join(refusal)


def _is_assistant_side(item: dict[str, Any]) -> bool:
    kind = item.get("type", "message")
    if kind == "message":
        return item.get("role") == "assistant"
    return kind in ("function_call", "custom_tool_call", "refusal")


def segments(items: Sequence[Any]) -> list[Segment]:
    out: list[Segment] = []
    pending: dict[str, Any] | None = None

    def close() -> None:
        nonlocal pending
        if pending is not None:
            # Joined once here: += on long texts would make this quadratic.
            text, refusal = "".join(pending["text"]), "".join(pending["refusal"])
            out.append(("assistant", text, refusal, tuple(pending["calls"])))
            pending = None

    for item in items:
        if not isinstance(item, dict):
            close()
            out.append(("other", canonical(item)))
            continue
        kind = item.get("type", "message")
        if kind == "reasoning":
            continue  # invisible to the client
        if _is_assistant_side(item):
            pending = pending or {"text": [], "refusal": [], "calls": []}
            if kind == "function_call":
                pending["calls"].append(
                    (item.get("call_id"), item.get("name"), item.get("arguments"))
                )
            elif kind == "custom_tool_call":  # shown to a client as a call with that text
                pending["calls"].append((item.get("call_id"), item.get("name"), item.get("input")))
            elif kind == "refusal":
                pending["refusal"].append(str(item.get("refusal", item.get("text", ""))))
            else:
                text, refusal = text_of(item.get("content"))
                pending["text"].append(text)
                pending["refusal"].append(refusal)
            continue
        close()
        if kind == "message":
            text, _ = text_of(item.get("content"))
            out.append((str(item.get("role")), text))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            out.append(
                (
                    "tool",
                    item.get("call_id"),
                    output if isinstance(output, str) else canonical(output),
                )
            )
        else:
            out.append(("other", canonical(item)))
    close()
    return out


def chat_segments(messages: Sequence[Any]) -> list[Segment]:
    """The segments of a Chat Completions ``messages`` list, as the relay's Responses input
    for it shows them: leading system/developer messages become ``instructions`` (scope,
    not input), an assistant message is its text, refusal and calls, a tool message its
    call id and output. Images are not mapped (their chat and Responses forms differ)."""
    items: list[Any] = []
    leading = True
    for message in messages:
        role = message.get("role") if isinstance(message, dict) else None
        if leading and role in ("system", "developer"):
            continue
        leading = False
        if not isinstance(message, dict):
            items.append(message)
        elif role == "assistant":
            text = message.get("content") or ""
            items.append({"type": "message", "role": "assistant", "content": text})
            if message.get("refusal"):
                items.append({"type": "refusal", "refusal": message["refusal"]})
            calls = message.get("tool_calls")
            for call in calls if isinstance(calls, list) else []:
                if not isinstance(call, dict):
                    continue  # bad input the upstream refuses; nothing a client sees
                nested = call.get("function")
                function: dict[str, Any] = nested if isinstance(nested, dict) else {}
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.get("id"),
                        "name": function.get("name"),
                        "arguments": function.get("arguments"),
                    }
                )
        elif role == "tool":
            output = message.get("content")
            call_id = message.get("tool_call_id")
            items.append({"type": "function_call_output", "call_id": call_id, "output": output})
        else:
            items.append({"type": "message", "role": role, "content": message.get("content")})
    return segments(items)


def output_segment(output: Sequence[Any]) -> Segment | None:
    """The one assistant segment a response's output shows the client (None if empty)."""
    found = segments(output)
    return found[0] if len(found) == 1 and found[0][0] == "assistant" else None


def scope_of(body: Any) -> str:
    if not isinstance(body, dict):
        return ""
    return canonical({key: body.get(key) for key in SCOPE_KEYS})


def input_items(body: Any) -> list[Any]:
    if not isinstance(body, dict):
        return []
    items = body.get("input")
    if isinstance(items, str):
        return [{"type": "message", "role": "user", "content": items}]
    return list(items) if isinstance(items, list) else []


def segment_index_of_item(items: Sequence[Any], index: int) -> int:
    """Which segment of ``segments(items)`` the item at ``index`` belongs to.

    A reasoning item belongs to the assistant segment it precedes (its block).
    """
    position = -1
    in_assistant = False
    for current, item in enumerate(items):
        assistant = isinstance(item, dict) and (
            _is_assistant_side(item) or item.get("type") == "reasoning"
        )
        if (isinstance(item, dict) and item.get("type") == "reasoning") or assistant:
            if not in_assistant:
                position += 1
                in_assistant = True
        else:
            position += 1
            in_assistant = False
        if current == index:
            return position
    return position
