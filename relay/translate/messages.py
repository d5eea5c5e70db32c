"""Chat messages as Responses ``input`` items (pure): leading system/developer messages
as ``instructions``, user content parts, assistant text, refusals and tool calls, tool
results paired with the kind of call they answer; the span of items each message became.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from relay.errors import InvalidRequest, UnsupportedParameter
from relay.translate.parameters import optional_str
from relay.translate.tools import named

IMAGE_DETAILS = ("low", "high", "auto")


def translate_messages(
    messages: Any,
) -> tuple[str | None, list[dict[str, Any]], tuple[tuple[int, int] | None, ...]]:
    if not isinstance(messages, list):
        raise InvalidRequest("'messages' must be an array of message objects", param="messages")
    if not messages:
        raise InvalidRequest("'messages' must contain at least one message", param="messages")
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    spans: list[tuple[int, int] | None] = []
    leading = True  # still in the run of system/developer messages that opens the chat
    call_kinds: dict[str, str] = {}  # call id → the item type it became, for its answer
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise InvalidRequest(f"'{where}' must be an object with a 'role'", param=where)
        role = message.get("role")
        start = len(items)
        if role in ("system", "developer"):
            text = _text_content(message.get("content"), where, allow_null=False)
            if leading:
                instructions.append(text)
                spans.append(None)
                continue
            items.append({"role": role, "content": [{"type": "input_text", "text": text}]})
        elif role == "user":
            items.append({"role": "user", "content": _user_content(message.get("content"), where)})
        elif role == "assistant":
            for item in _assistant_items(message, where):
                if "call_id" in item:
                    call_kinds.setdefault(item["call_id"], item["type"])
                items.append(item)
        elif role == "tool":
            items.append(_tool_output(message, where, call_kinds))
        elif role == "function":
            raise InvalidRequest(
                f"'{where}.role': the legacy 'function' role is not supported; send the result "
                "as a 'tool' message with the call's 'tool_call_id'",
                param=f"{where}.role",
            )
        else:
            raise InvalidRequest(
                f"'{where}.role' must be one of system, developer, user, assistant, tool; "
                f"got {role!r}",
                param=f"{where}.role",
            )
        leading = False
        spans.append((start, len(items)))
    return ("\n\n".join(instructions) if instructions else None), items, tuple(spans)


def _text_content(content: Any, where: str, *, allow_null: bool) -> str:
    """A string, or the concatenation of a list of text parts."""
    if isinstance(content, str):
        return content
    if content is None and allow_null:
        return ""
    if not isinstance(content, list):
        raise InvalidRequest(
            f"'{where}.content' must be a string or an array of text parts",
            param=f"{where}.content",
        )
    texts = []
    for j, part in enumerate(content):
        texts.append(_text_part(part, f"{where}.content[{j}]"))
    return "".join(texts)


def _text_part(part: Any, where: str) -> str:
    if not isinstance(part, dict):
        raise InvalidRequest(f"'{where}' must be an object with a 'type'", param=where)
    if part.get("type") != "text":
        raise InvalidRequest(
            f"'{where}.type' must be 'text' here; got {part.get('type')!r}", param=f"{where}.type"
        )
    text = part.get("text")
    if not isinstance(text, str):
        raise InvalidRequest(f"'{where}.text' must be a string", param=f"{where}.text")
    return text


def _user_content(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    if not isinstance(content, list) or not content:
        raise InvalidRequest(
            f"'{where}.content' must be a string or a non-empty array of content parts",
            param=f"{where}.content",
        )
    parts = []
    for j, part in enumerate(content):
        at = f"{where}.content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            parts.append({"type": "input_text", "text": _text_part(part, at)})
        elif kind == "image_url":
            parts.append(_image_part(part, at))
        elif isinstance(part, dict):
            raise InvalidRequest(
                f"'{at}.type' {kind!r} is not supported; user content parts may be 'text' or "
                "'image_url'",
                param=f"{at}.type",
            )
        else:
            raise InvalidRequest(f"'{at}' must be an object with a 'type'", param=at)
    return parts


def _image_part(part: dict[str, Any], where: str) -> dict[str, Any]:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else None
    if not isinstance(url, str) or not url:
        raise InvalidRequest(
            f"'{where}.image_url.url' must be an image URL or data URL string",
            param=f"{where}.image_url.url",
        )
    assert isinstance(image, dict)
    detail = image.get("detail")
    if detail is not None and detail not in IMAGE_DETAILS:
        raise InvalidRequest(
            f"'{where}.image_url.detail' must be one of low, high, auto",
            param=f"{where}.image_url.detail",
        )
    return {"type": "input_image", "image_url": url, "detail": detail or "auto"}


def _assistant_items(message: dict[str, Any], where: str) -> list[dict[str, Any]]:
    for legacy in ("function_call", "audio"):
        if message.get(legacy) is not None:
            raise UnsupportedParameter(
                f"'{where}.{legacy}' cannot be relayed; send tool calls as 'tool_calls' and "
                "text as 'content'",
                param=f"{where}.{legacy}",
            )
    text, refusals = _assistant_content(message.get("content"), where)
    refusal = optional_str(message, "refusal", f"{where}.refusal")
    if refusal:
        refusals.append(refusal)
    parts: list[dict[str, Any]] = []
    if text:
        parts.append({"type": "output_text", "text": text, "annotations": []})
    parts.extend({"type": "refusal", "refusal": r} for r in refusals)
    items: list[dict[str, Any]] = []
    if parts:
        items.append({"type": "message", "role": "assistant", "content": parts})
    calls = message.get("tool_calls")
    if calls is None:
        return items
    if not isinstance(calls, list):
        raise InvalidRequest(f"'{where}.tool_calls' must be an array", param=f"{where}.tool_calls")
    for k, call in enumerate(calls):
        items.append(_tool_call_item(call, f"{where}.tool_calls[{k}]"))
    return items


def _assistant_content(content: Any, where: str) -> tuple[str, list[str]]:
    """(concatenated text, refusal texts) of an assistant ``content``."""
    if content is None or isinstance(content, str):
        return content or "", []
    if not isinstance(content, list):
        raise InvalidRequest(
            f"'{where}.content' must be a string, an array of parts, or null",
            param=f"{where}.content",
        )
    texts: list[str] = []
    refusals: list[str] = []
    for j, part in enumerate(content):
        at = f"{where}.content[{j}]"
        if isinstance(part, dict) and part.get("type") == "refusal":
            refusal = part.get("refusal")
            if not isinstance(refusal, str):
                raise InvalidRequest(f"'{at}.refusal' must be a string", param=f"{at}.refusal")
            if refusal:
                refusals.append(refusal)
        else:
            texts.append(_text_part(part, at))
    return "".join(texts), refusals


def _tool_call_item(call: Any, where: str) -> dict[str, Any]:
    """A function_call item, or a custom_tool_call one for a call of type custom."""
    if not isinstance(call, dict):
        raise InvalidRequest(f"'{where}' must be an object", param=where)
    kind = call.get("type", "function")
    if kind not in ("function", "custom"):
        raise UnsupportedParameter(
            f"'{where}.type' must be 'function' or 'custom'; the relay translates function and "
            "custom tool calls only",
            param=f"{where}.type",
        )
    index = call.get("index")  # Cursor sends it; position already says the same
    if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
        raise InvalidRequest(f"'{where}.index' must be an integer", param=f"{where}.index")
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidRequest(f"'{where}.id' must be a non-empty string", param=f"{where}.id")
    if kind == "custom":
        return _custom_call(call, call_id, where)
    fn = named(call, "function", where)
    name = fn["name"]
    arguments = fn.get("arguments")
    if not isinstance(arguments, str):  # the content is opaque; only the type is checked
        raise InvalidRequest(
            f"'{where}.function.arguments' must be a string", param=f"{where}.function.arguments"
        )
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def _custom_call(call: dict[str, Any], call_id: str, where: str) -> dict[str, Any]:
    custom = named(call, "custom", where)
    name, text = custom["name"], custom.get("input")
    if not isinstance(text, str):  # freeform text: forwarded exactly as sent
        raise InvalidRequest(
            f"'{where}.custom.input' must be a string", param=f"{where}.custom.input"
        )
    return {"type": "custom_tool_call", "call_id": call_id, "name": name, "input": text}


OUTPUT_TYPES = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
}


def _tool_output(
    message: dict[str, Any], where: str, call_kinds: Mapping[str, str]
) -> dict[str, Any]:
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidRequest(
            f"'{where}.tool_call_id' must name the tool call this message answers",
            param=f"{where}.tool_call_id",
        )
    optional_str(message, "name", f"{where}.name")  # Cursor sends it; Responses has no slot
    output = _text_content(message.get("content"), where, allow_null=False)
    kind = call_kinds.get(call_id)
    if kind is None:  # the upstream would refuse it too, but could not say which message
        raise InvalidRequest(
            f"'{where}' answers tool call '{call_id}', which no earlier assistant message "
            "made; send the assistant message with that call before its result",
            param=f"{where}.tool_call_id",
        )
    return {"type": OUTPUT_TYPES[kind], "call_id": call_id, "output": output}
