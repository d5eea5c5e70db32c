"""Cursor's Responses-shaped body → Responses request (pure; no I/O).

For some models Cursor sends a Responses body (``input``, ``instructions``, flat ``tools``)
to ``/chat/completions`` and still expects a Chat Completions answer. The body is already
in upstream form, so this module only validates what the relay itself relies on, swaps in
the upstream model, applies the sampling rules and alias reasoning defaults, and keeps
every other field as sent (the upstream validates those). ``null`` values are left out.

Custom tools (``{"type": "custom", ...}``, e.g. Cursor's ApplyPatch grammar tool) pass
through. The upstream gets every call to one as a ``custom_tool_call`` and every result
of one as a ``custom_tool_call_output`` (an output must answer a call of its own kind):
a ``function_call`` item whose ``name`` is a tool declared ``custom`` in ``tools`` becomes
``{"type": "custom_tool_call", call_id, name, "input": <its arguments>}`` (ids and status
left out: an ``fc_`` id cannot name a custom call), and an output item answering a call
takes that call's kind (``function_call_output`` or ``custom_tool_call_output``, the rest
of the item kept). Clients hand the call back either way (the relay may have sent it as a
function-type Chat call). An output that answers no earlier call, and a custom call left
without its result while other input follows it, are refused with a 400 that names the
item, before anything is sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from relay.core.responses_history import custom_tool_names
from relay.errors import InvalidRequest, UnsupportedParameter
from relay.settings.custom_calls import CustomCallForm
from relay.settings.model_alias import ModelAlias
from relay.translate.messages import OUTPUT_TYPES
from relay.translate.parameters import (
    PASSTHROUGH,
    client_model_name,
    optional_str,
    parse_reasoning_object,
    reasoning_settings,
    stream_flags,
)
from relay.translate.request_types import TranslatedRequest
from relay.translate.sampling import sampling_params

# Responses fields that cannot work through a stateless relay that always streams upstream,
# with what the client should do instead. A null (or false, for background) is accepted.
# Each refusal is counted by parameter (relay_refused_params_total), so an owner sees it.
REFUSED: dict[str, str] = {
    "previous_response_id": (
        "the relay keeps no responses (with its replay cache on it sends store:false), so "
        "it cannot resolve a previous response; send the whole conversation in 'input' and "
        "leave 'previous_response_id' out (a client that chains responses by id, Cursor "
        "included, must have that turned off for this endpoint). Replay of the model's "
        "reasoning needs no response id: the relay restores it from the conversation"
    ),
    "conversation": "the relay is stateless; send the whole conversation in 'input'",
    "background": "background responses cannot be relayed; remove 'background'",
}

# Consumed here rather than copied: the relay decides these itself.
CONSUMED = frozenset({"model", "stream", "stream_options", "input", "instructions", "reasoning",
                      "temperature", "top_p"})  # fmt: skip


def translate_responses_shape(
    body: Mapping[str, Any],
    target: ModelAlias,
    *,
    reasoning_summaries: bool,
    custom_tool_calls: CustomCallForm = "function",
) -> TranslatedRequest:
    for key, reason in REFUSED.items():
        if body.get(key) not in (None, False):
            raise UnsupportedParameter(f"'{key}' is not supported: {reason}", param=key)
    client_model = client_model_name(body)
    stream, include_usage = stream_flags(body)

    out: dict[str, Any] = {"model": target.model}
    instructions = optional_str(body, "instructions")
    if instructions is not None:
        out["instructions"] = instructions
    out["input"] = _checked_input(body.get("input"))
    effort = summary = context = None
    if body.get("reasoning") is not None:
        effort, summary, context = parse_reasoning_object(body["reasoning"], "reasoning")
    settings = reasoning_settings(
        effort, summary, target, context=context, reasoning_summaries=reasoning_summaries
    )
    if settings:
        out["reasoning"] = settings
    out.update(sampling_params(body, target.model, target.sampling))
    for key, value in body.items():
        if key in CONSUMED or value is None:
            continue
        if key in PASSTHROUGH and not PASSTHROUGH[key][0](value):
            raise InvalidRequest(f"'{key}' must be {PASSTHROUGH[key][1]}", param=key)
        if key == "tools" and not isinstance(value, list):
            raise InvalidRequest("'tools' must be an array of tools", param="tools")
        out[key] = value
    if not out.get("tools"):
        out.pop("tools", None)  # Cursor may send an empty list; it means "no tools"
    if isinstance(out["input"], list):
        out["input"] = resolve_tool_calls(out["input"], custom_tool_names(out.get("tools")))
    user = body.get("user")
    return TranslatedRequest(
        out, stream, include_usage, client_model, user, "responses",
        custom_tool_calls=custom_tool_calls,
    )  # fmt: skip


_CALL_TYPES = frozenset(OUTPUT_TYPES)
_ANSWER_TYPES = frozenset(OUTPUT_TYPES.values())


def resolve_tool_calls(items: list[Any], custom_names: frozenset[str]) -> list[Any]:
    """``items`` with calls to custom tools and their results in their upstream kinds (see
    the module docstring); raises :class:`InvalidRequest` for a pairing it cannot resolve.
    Items that need no change are the client's own objects."""
    out: list[Any] = []
    kinds: dict[str, str] = {}  # call_id → the call item type it went upstream as
    unanswered: dict[str, int] = {}  # custom calls without a result yet → their index
    for i, sent in enumerate(items):
        item, kind, call_id = sent, sent.get("type"), sent.get("call_id")
        if kind == "function_call" and item.get("name") in custom_names:
            item = {"type": "custom_tool_call", "call_id": call_id, "name": item["name"],
                    "input": item.get("arguments")}  # fmt: skip
            kind = "custom_tool_call"
        if kind in _CALL_TYPES and isinstance(call_id, str):
            kinds.setdefault(call_id, kind)
            if kind == "custom_tool_call":
                unanswered.setdefault(call_id, i)
        elif kind in _ANSWER_TYPES:
            called = kinds.get(call_id) if isinstance(call_id, str) else None
            if called is None or not isinstance(call_id, str):
                raise InvalidRequest(
                    f"'input[{i}]' ({kind}) answers call_id {call_id!r}, which no earlier "
                    "function_call or custom_tool_call in 'input' made; send the call before "
                    "its result",
                    param=f"input[{i}]",
                )
            unanswered.pop(call_id, None)
            if OUTPUT_TYPES[called] != kind:
                item = {**item, "type": OUTPUT_TYPES[called]}
        elif kind != "reasoning" and unanswered:
            call_id, at = next(iter(unanswered.items()))
            raise InvalidRequest(
                f"'input[{at}]' is a call of custom tool {items[at].get('name')!r} (call_id "
                f"{call_id!r}) with no result before 'input[{i}]'; send its "
                "custom_tool_call_output (or function_call_output) right after the call",
                param=f"input[{at}]",
            )
        out.append(item)
    return out


def _checked_input(value: Any) -> str | list[Any]:
    """``input`` is a string or a non-empty list of items, each with a ``type`` or ``role``."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list) or not value:
        raise InvalidRequest(
            "'input' must be a string or a non-empty array of input items", param="input"
        )
    for i, item in enumerate(value):
        if not isinstance(item, dict) or not (
            isinstance(item.get("type"), str) or isinstance(item.get("role"), str)
        ):
            raise InvalidRequest(
                f"'input[{i}]' must be an object with a 'type' or a 'role'", param=f"input[{i}]"
            )
    return list(value)  # a copy: later stages may replace items without touching the client body
