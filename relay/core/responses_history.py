"""Responses-shaped bodies (``input`` + ``instructions``) as visible Chat envelopes.

Cursor sends GPT-5-family models ``input`` items instead of ``messages``. Their history is
hashed as the Chat envelopes it stands for, so a prediction made from the Chat output can
match it. The one rule: two inputs that map to the same envelopes must be the same model
input. Where an item cannot be mapped under that rule, the history is *underivable* (an
:class:`Underivable` with a reason code) and the request fences (design §2). Scope keeps a
``body_shape``, so these never match Chat-shaped histories.

Equal on purpose (the only places two different inputs share envelopes):

- ``input`` as a string ≡ one user message with that string: the API defines the string
  as that message.
- ``"type": "message"`` present ≡ absent on a message item: the API's default type.
- ``status`` on any item is left out: the API documents it as populated when items are
  *returned*; it is not part of what the model reads. Only its three values are accepted
  (``in_progress``, ``completed``, ``incomplete``).
- Empty ``annotations``/``logprobs`` beside an ``output_text`` ≡ absent: what an echoed
  answer carries and what the Chat→Responses translation sends (``annotations: []``).

Every other mapping keeps the input apart, and the mapping is injective because each
output form comes from exactly one input form:

1. ``instructions`` → a leading ``{"role": "system", "content": <string>}``.
2. A user or developer message item with string content → that role with the string. A
   system item with string content is *not* this form (it would collide with 1): it is
   verbatim (7).
3. A user/system/developer item with a list of parts → that role with mapped parts:
   ``{"type": "input_text", "text"}`` exactly → ``{"type": "text", "text"}``; every other
   part object (``input_image`` and ``input_file`` with a URL, data URL or file id, any
   ``detail``; an ``input_text`` with more keys) is kept as sent. A kept part never has
   type ``"text"`` (a client ``"text"`` part is underivable), so kept and mapped parts
   never meet, and parts map one to one, in order. Images and files are hashed as sent,
   exactly as the Chat shape hashes ``image_url`` parts: a URL or file id stands for its
   content.
4. An assistant item of exactly the translation's form (one non-empty ``output_text``
   part, nothing else beside ``text`` but empty ``annotations``/``logprobs``) →
   ``{"role": "assistant", "content": <text>, "tool_calls": [...]}``. Its text is never
   empty, so it is never the envelope of 5.
5. ``function_call`` items (``call_id``, ``name``, ``arguments`` strings) → tool calls, in
   order, of the assistant envelope right before them (4 or 7), or of a new envelope with
   empty text when none is open; ``arguments`` are kept as sent. The translation writes
   an assistant message as its text item followed by its calls, so this grouping inverts
   it: a run of calls always joins the envelope before it, anything else ends the run.
   A call with an ``id`` keeps it (``"item": {"id": ...}`` on the call): no prediction has
   one, so it never replays, but it never fences either.
6. ``function_call_output`` → ``{"role": "tool", "tool_call_id", "content"}`` with the
   string ``output`` as sent, or its parts mapped as in 3; an ``id`` is kept as in 5.
   ``custom_tool_call_output`` maps exactly like ``function_call_output``: the relay
   sends an output upstream as the kind of the call it answers (an output answering no
   call is refused), and that call, with its kind, is earlier in the same history.
7. Any other message item of a known role (assistant content as a string, empty, split,
   with a refusal or annotations; a system string; an ``id`` or any other field) →
   ``{"role": <role>, "item": <the item as sent, less type and status>}`` (plus
   ``tool_calls`` for an assistant). Only this form has an ``item`` key, and it keeps
   everything that was sent. It never matches a prediction (so replay stops at it) but
   it is an exact identity, so the request is observed and fences nothing.
8. Custom tool calls: a ``custom_tool_call`` item (``call_id``, ``name``, ``input``
   strings) → a tool call ``{"id", "type": "custom", "custom": {"name", "input"}}``,
   grouped like a function call; so is a ``function_call`` item whose ``name`` is a tool
   declared ``custom`` in the request's ``tools`` (``input`` = its ``arguments``). The
   translation (``relay.translate.responses_input``) sends both spellings upstream as the
   one item ``{"type": "custom_tool_call", call_id, name, input}`` (the function spelling
   without its ``id``, so that ``id`` is left out here too), and ``tools`` is scope, so
   within one scope the call's type says exactly which item went upstream. A
   ``custom_tool_call`` keeps its ``id`` as in 5 (it goes upstream with it).

Underivable (each with its code, :data:`REASON_TEXT`): an ``input`` that is neither a
string nor a list, ``instructions`` that are not a string, an item that is not an object,
an item of another type (``reasoning``: the client replays reasoning itself and a
replayed block would duplicate it; ``item_reference``: the model reads content the
request does not carry; the built-in tools' calls), a message with another role, a
``"text"`` part or a non-object part, a call or output with a non-string field or an
unknown one, a ``status`` outside the API's three values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from relay.errors import InternalSignal

# Item types of the Responses API's input (openai-python ``ResponseInputItemParam``) that
# have no mapping: the item-type reason codes are drawn from this list, so a client cannot
# mint a label.
KNOWN_ITEM_TYPES: Final = (
    "reasoning", "item_reference", "file_search_call", "computer_call",
    "computer_call_output", "web_search_call", "image_generation_call",
    "code_interpreter_call", "local_shell_call", "local_shell_call_output", "shell_call",
    "shell_call_output", "apply_patch_call", "apply_patch_call_output", "mcp_list_tools",
    "mcp_approval_request", "mcp_approval_response", "mcp_call", "compaction",
)  # fmt: skip

# Reason code -> what it means, for the log, the metric's help and ``relay status``.
REASON_TEXT: Final[dict[str, str]] = {
    "input_type": "'input' is neither a string nor an array",
    "instructions_type": "'instructions' is not a string",
    "item_not_object": "an input item that is not an object",
    "item_type_unknown": "an input item of an unknown type",
    **{f"item_type_{kind}": f"input item type '{kind}'" for kind in KNOWN_ITEM_TYPES},
    "message_role": "a message item with an unknown role",
    "content_part": "a content part that is not an object, or of type 'text'",
    "field_type": "a call or output field of the wrong type",
    "item_field": "a call or output item with an unknown field",
    "item_status": "an item 'status' outside in_progress/completed/incomplete",
}

_ROLES: Final = ("user", "system", "developer", "assistant")
_STATUSES: Final = ("in_progress", "completed", "incomplete")
_CALL_FIELDS: Final = frozenset({"type", "call_id", "name", "arguments", "status", "id"})
_CUSTOM_CALL_FIELDS: Final = frozenset({"type", "call_id", "name", "input", "status", "id"})
_OUTPUT_FIELDS: Final = frozenset({"type", "call_id", "output", "status", "id"})
_CALL_ITEMS: Final = ("function_call", "custom_tool_call")
_OUTPUT_ITEMS: Final = ("function_call_output", "custom_tool_call_output")
_TEXT_PART_KEYS: Final = frozenset({"type", "text"})
_OUTPUT_TEXT_KEYS: Final = frozenset({"type", "text", "annotations", "logprobs"})


@dataclass(frozen=True)
class Underivable:
    """Why a Responses-shaped history has no exact visible identity."""

    code: str  # a key of REASON_TEXT: bounded, safe as a metric label
    where: str | None = None  # e.g. "input[3]" (positions only, never client text)

    @property
    def text(self) -> str:
        return REASON_TEXT[self.code]


Spans = tuple[tuple[int, int] | None, ...]


class _Refused(InternalSignal):
    def __init__(self, code: str, where: str | None = None) -> None:
        super().__init__(code)
        self.reason = Underivable(code, where)


def custom_tool_names(tools: Any) -> frozenset[str]:
    """The names of the tools declared ``custom`` in a Responses ``tools`` list (the
    translation resolves calls to them by the same names, ``relay.translate.responses_input``)."""
    if not isinstance(tools, list):
        return frozenset()
    return frozenset(
        tool["name"]
        for tool in tools
        if isinstance(tool, dict)
        and tool.get("type") == "custom"
        and isinstance(tool.get("name"), str)
    )


def derive_responses_history(
    input_value: Any, instructions: Any, tools: Any = None
) -> tuple[list[dict[str, Any]], Spans] | Underivable:
    """The envelopes plus, for each, the ``[start, end)`` range of ``input`` items it
    stands for (``None`` for ``instructions`` and a string ``input``), or why there are
    none. ``tools`` is the request's ``tools`` (its custom tools name the custom calls)."""
    try:
        return _map(input_value, instructions, custom_tool_names(tools))
    except _Refused as refused:
        return refused.reason


def visible_history_from_responses_input(
    input_value: Any, instructions: Any, tools: Any = None
) -> tuple[list[dict[str, Any]], Spans] | None:
    """:func:`derive_responses_history` without the reason (``None``: underivable)."""
    derived = derive_responses_history(input_value, instructions, tools)
    return None if isinstance(derived, Underivable) else derived


def visible_messages_from_responses_input(
    input_value: Any, instructions: Any, tools: Any = None
) -> list[dict[str, Any]] | None:
    """The Chat envelopes a Responses-shaped body stands for, or ``None`` (underivable)."""
    history = visible_history_from_responses_input(input_value, instructions, tools)
    return None if history is None else history[0]


def item_type_code(kind: Any) -> str:
    """The reason code of an unmappable item type (bounded: known types only)."""
    return f"item_type_{kind}" if kind in KNOWN_ITEM_TYPES else "item_type_unknown"


def _map(
    input_value: Any, instructions: Any, custom_names: frozenset[str]
) -> tuple[list[dict[str, Any]], Spans]:
    messages: list[dict[str, Any]] = []
    spans: list[tuple[int, int] | None] = []
    if instructions is not None:
        if not isinstance(instructions, str):
            raise _Refused("instructions_type")
        messages.append({"role": "system", "content": instructions})
        spans.append(None)
    if isinstance(input_value, str):
        messages.append({"role": "user", "content": input_value})
        spans.append(None)  # the string is the whole input, never a replaceable item
        return messages, tuple(spans)
    if not isinstance(input_value, list):
        raise _Refused("input_type")
    open_assistant: dict[str, Any] | None = None  # the envelope function calls attach to
    for index, item in enumerate(input_value):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise _Refused("item_not_object", where)
        _check_status(item, where)
        kind = item.get("type", "message")
        if kind in _CALL_ITEMS:
            if open_assistant is None:
                open_assistant = {"role": "assistant", "content": "", "tool_calls": []}
                messages.append(open_assistant)
                spans.append((index, index))
            open_assistant["tool_calls"].append(_tool_call(item, where, custom_names))
            span = spans[-1]
            assert span is not None  # the open assistant's own span
            spans[-1] = (span[0], index + 1)
            continue
        open_assistant = None
        if kind in _OUTPUT_ITEMS:
            messages.append(_tool_message(item, where))
        elif kind == "message":
            message = _message(item, where)
            messages.append(message)
            if message["role"] == "assistant":
                open_assistant = message
        else:
            raise _Refused(item_type_code(kind), where)
        spans.append((index, index + 1))
    return messages, tuple(spans)


def _check_status(item: dict[str, Any], where: str) -> None:
    if "status" in item and item["status"] not in _STATUSES:
        raise _Refused("item_status", where)


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in _ROLES:
        raise _Refused("message_role", where)
    content = item.get("content")
    if item.keys() <= {"type", "role", "content", "status"}:
        if role in ("user", "developer") and isinstance(content, str):
            return {"role": role, "content": content}  # form 2
        if role != "assistant" and isinstance(content, list):
            return {"role": role, "content": _parts(content, where)}  # form 3
        if role == "assistant" and (text := _exact_output_text(content)) is not None:
            return {"role": "assistant", "content": text, "tool_calls": []}  # form 4
    # Form 7: kept whole (less the two fields that carry nothing), marked by "item".
    kept = {key: value for key, value in item.items() if key not in ("type", "status")}
    if role == "assistant":
        return {"role": "assistant", "item": kept, "tool_calls": []}
    if isinstance(content, list):
        _parts(content, where)  # the same part checks as form 3 (a "text" part refuses)
    return {"role": role, "item": kept}


def _parts(content: list[Any], where: str) -> list[Any]:
    parts: list[Any] = []
    for position, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") == "text":
            raise _Refused("content_part", f"{where}.content[{position}]")
        if part.keys() == _TEXT_PART_KEYS and part["type"] == "input_text":
            parts.append({"type": "text", "text": _string(part["text"], where)})
        else:
            parts.append(part)  # an image, a file, anything else: hashed as sent
    return parts


def _exact_output_text(content: Any) -> str | None:
    """The text of the translation's assistant form, or ``None`` when it is another."""
    if not isinstance(content, list) or len(content) != 1:
        return None
    part = content[0]
    if not isinstance(part, dict) or part.get("type") != "output_text":
        return None
    if not part.keys() <= _OUTPUT_TEXT_KEYS:
        return None
    if any(part.get(key, []) != [] for key in ("annotations", "logprobs")):
        return None
    text = part.get("text")
    if not isinstance(text, str) or not text:
        return None  # the translation never sends an empty text item
    return text


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _Refused("field_type", where)
    return value


def _extra(item: dict[str, Any], fields: frozenset[str], where: str) -> dict[str, Any]:
    """The ``id`` of a call or output item (kept, so it stays apart), after checking that
    every field is one the mapping knows."""
    if not item.keys() <= fields:
        raise _Refused("item_field", where)
    if "id" not in item:
        return {}
    return {"item": {"id": _string(item["id"], where)}}


def _tool_call(item: dict[str, Any], where: str, custom_names: frozenset[str]) -> dict[str, Any]:
    call_id, name = _string(item.get("call_id"), where), _string(item.get("name"), where)
    if item["type"] == "custom_tool_call":
        extra = _extra(item, _CUSTOM_CALL_FIELDS, where)
        text = _string(item.get("input"), where)
    else:
        extra = _extra(item, _CALL_FIELDS, where)
        text = _string(item.get("arguments"), where)
        if name not in custom_names:
            function = {"name": name, "arguments": text}
            return {"id": call_id, "type": "function", "function": function, **extra}
        extra = {}  # the translation sends this spelling upstream without its id
    # One envelope for both spellings: the translation sends both as this custom call.
    custom = {"name": name, "input": text}
    return {"id": call_id, "type": "custom", "custom": custom, **extra}


def _tool_message(item: dict[str, Any], where: str) -> dict[str, Any]:
    extra = _extra(item, _OUTPUT_FIELDS, where)
    output = item.get("output")
    content = _parts(output, where) if isinstance(output, list) else _string(output, where)
    return {
        "role": "tool",
        "tool_call_id": _string(item.get("call_id"), where),
        "content": content,
        **extra,
    }
