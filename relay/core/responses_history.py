"""Responses-shaped bodies (``input`` + ``instructions``) as visible Chat envelopes.

Some models make Cursor send ``input`` items instead of ``messages``. Their history is
hashed as the Chat envelopes it stands for, so a prediction made from the Chat output can
match it. The one rule: two inputs that map to the same envelopes must be the same model
input. Where that cannot be shown, the history is *underivable* (``None``) and the request
is not cached. Scope keeps a ``body_shape``, so these never match Chat-shaped histories.

Exact, and why:

- ``instructions`` → a leading ``{"role": "system", "content": <string>}``. Input
  system/developer messages always map to *parts* form (below), so the string form can
  only come from ``instructions``.
- ``input`` as a string → one user message with that string: the API defines the string
  as that message. A user message item keeps its form: string content → string, a list of
  ``input_text`` parts → ``text`` parts (the forms stay distinct, as in Chat).
- A system/developer message item with a list of ``input_text`` parts → the same role
  with ``text`` parts.
- An assistant message item with exactly one non-empty ``output_text`` part (only
  ``annotations``/``logprobs`` that are empty lists beside ``text``) → an assistant
  envelope with that text: what the Chat→Responses translation makes of an assistant text.
- ``function_call`` items (``call_id``, ``name``, ``arguments`` strings only) → tool calls,
  in order, of the assistant envelope right before them, or of a new empty-text envelope
  when none is open; ``arguments`` are kept as sent. The translation writes an assistant
  message as its text item followed by its calls, so this grouping inverts it.
- ``function_call_output`` with a string ``output`` → ``{"role": "tool", "tool_call_id",
  "content"}``.
- Custom tool calls: a ``custom_tool_call`` item (``call_id``, ``name``, ``input`` strings
  only) → a tool call ``{"id", "type": "custom", "custom": {"name", "input"}}``, grouped
  like a function call; so is a ``function_call`` item whose ``name`` is a tool declared
  ``custom`` in the request's ``tools`` (``input`` = its ``arguments``). A
  ``custom_tool_call_output`` with a string ``output`` → the same tool message as a
  ``function_call_output``.

  Why this stays injective: the translation (``relay.translate.responses_input``) sends
  both call spellings as the one upstream item ``{"type": "custom_tool_call", call_id,
  name, input}``, and a function call to a name not declared custom as a
  ``function_call``; ``tools`` is part of the scope, so within one scope the envelope's
  call type says exactly which item went upstream. An output goes upstream as the kind
  of the call it answers (an output answering no call is refused), and that call, with
  its type, is earlier in the same history: the tool message plus the history before it
  determine the output item. Two histories with equal envelopes therefore send equal
  model input.
- ``"type": "message"`` may be present or absent on message items (the API's default).

Underivable: any image or file part; a custom call item with ``id``/``status`` or any
other extra field; reasoning, item-reference or any other item type; a
refusal part; assistant content that is a string, empty, split into several parts or has
non-empty annotations; system/developer string content (it would collide with
``instructions``); message items carrying ``id``/``status`` or any other extra field;
non-string ids, names, arguments or outputs; an ``input`` that is neither a string nor a
list.
"""

from __future__ import annotations

from typing import Any, Final

from relay.translate.responses_input import custom_tool_names

_MESSAGE_KEYS: Final = frozenset({"type", "role", "content"})
_CALL_KEYS: Final = frozenset({"type", "call_id", "name", "arguments"})
_OUTPUT_KEYS: Final = frozenset({"type", "call_id", "output"})
_CUSTOM_CALL_KEYS: Final = frozenset({"type", "call_id", "name", "input"})
_CALL_ITEMS: Final = ("function_call", "custom_tool_call")
_OUTPUT_ITEMS: Final = ("function_call_output", "custom_tool_call_output")


class _Underivable(Exception):
    pass


def visible_messages_from_responses_input(
    input_value: Any, instructions: Any, tools: Any = None
) -> list[dict[str, Any]] | None:
    """The Chat envelopes a Responses-shaped body stands for, or ``None`` (underivable)."""
    history = visible_history_from_responses_input(input_value, instructions, tools)
    return None if history is None else history[0]


def visible_history_from_responses_input(
    input_value: Any, instructions: Any, tools: Any = None
) -> tuple[list[dict[str, Any]], tuple[tuple[int, int] | None, ...]] | None:
    """The envelopes plus, for each, the ``[start, end)`` range of ``input`` items it
    stands for (``None`` for ``instructions``), or ``None`` (underivable). ``tools`` is the
    request's ``tools`` (its custom tools name the custom calls)."""
    try:
        return _map(input_value, instructions, custom_tool_names(tools))
    except _Underivable:
        return None


def _map(
    input_value: Any, instructions: Any, custom_names: frozenset[str]
) -> tuple[list[dict[str, Any]], tuple[tuple[int, int] | None, ...]]:
    messages: list[dict[str, Any]] = []
    spans: list[tuple[int, int] | None] = []
    if instructions is not None:
        messages.append({"role": "system", "content": _string(instructions)})
        spans.append(None)
    if isinstance(input_value, str):
        messages.append({"role": "user", "content": input_value})
        spans.append(None)  # the string is the whole input, never a replaceable item
        return messages, tuple(spans)
    if not isinstance(input_value, list):
        raise _Underivable
    open_assistant: dict[str, Any] | None = None  # the envelope function calls attach to
    for index, item in enumerate(input_value):
        if not isinstance(item, dict):
            raise _Underivable
        kind = item.get("type", "message")
        if kind in _CALL_ITEMS:
            if open_assistant is None:
                open_assistant = {"role": "assistant", "content": "", "tool_calls": []}
                messages.append(open_assistant)
                spans.append((index, index))
            open_assistant["tool_calls"].append(_tool_call(item, custom_names))
            span = spans[-1]
            assert span is not None  # the open assistant's own span
            spans[-1] = (span[0], index + 1)
            continue
        open_assistant = None
        if kind in _OUTPUT_ITEMS:
            messages.append(_tool_message(item))
        elif kind == "message":
            message = _message(item)
            messages.append(message)
            if message["role"] == "assistant":
                open_assistant = message
        else:
            raise _Underivable
        spans.append((index, index + 1))
    return messages, tuple(spans)


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise _Underivable
    return value


def _only_keys(item: dict[str, Any], allowed: frozenset[str]) -> None:
    if not item.keys() <= allowed:
        raise _Underivable


def _message(item: dict[str, Any]) -> dict[str, Any]:
    _only_keys(item, _MESSAGE_KEYS)
    role = item.get("role")
    content = item.get("content")
    if role == "user" and isinstance(content, str):
        return {"role": "user", "content": content}
    if role in ("user", "system", "developer"):
        return {"role": role, "content": _text_parts(content)}
    if role == "assistant":
        return {"role": "assistant", "content": _output_text(content), "tool_calls": []}
    raise _Underivable


def _text_parts(content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, list) or not content:
        raise _Underivable
    parts = []
    for part in content:
        if not isinstance(part, dict) or part.keys() != {"type", "text"}:
            raise _Underivable
        if part["type"] != "input_text":
            raise _Underivable
        parts.append({"type": "text", "text": _string(part["text"])})
    return parts


def _output_text(content: Any) -> str:
    if not isinstance(content, list) or len(content) != 1:
        raise _Underivable
    part = content[0]
    if not isinstance(part, dict) or part.get("type") != "output_text":
        raise _Underivable
    _only_keys(part, frozenset({"type", "text", "annotations", "logprobs"}))
    if any(part.get(key, []) != [] for key in ("annotations", "logprobs")):
        raise _Underivable
    text = _string(part.get("text"))
    if not text:
        raise _Underivable  # the translation never sends an empty text item
    return text


def _tool_call(item: dict[str, Any], custom_names: frozenset[str]) -> dict[str, Any]:
    call_id, name = _string(item.get("call_id")), _string(item.get("name"))
    if item["type"] == "custom_tool_call":
        _only_keys(item, _CUSTOM_CALL_KEYS)
        text = _string(item.get("input"))
    else:
        _only_keys(item, _CALL_KEYS)
        text = _string(item.get("arguments"))
        if name not in custom_names:
            function = {"name": name, "arguments": text}
            return {"id": call_id, "type": "function", "function": function}
    # One envelope for both spellings: the translation sends both as this custom call.
    return {"id": call_id, "type": "custom", "custom": {"name": name, "input": text}}


def _tool_message(item: dict[str, Any]) -> dict[str, Any]:
    _only_keys(item, _OUTPUT_KEYS)
    return {
        "role": "tool",
        "tool_call_id": _string(item.get("call_id")),
        "content": _string(item.get("output")),
    }
