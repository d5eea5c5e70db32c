"""Cursor's Responses-shaped body → Responses request (pure; no I/O).

For some models Cursor sends a Responses body (``input``, ``instructions``, flat ``tools``)
to ``/chat/completions`` and still expects a Chat Completions answer. The body is already
in upstream form, so this module only validates what the relay itself relies on, swaps in
the upstream model, applies the sampling rules and alias reasoning defaults, and keeps
every other field as sent (the upstream validates those). ``null`` values are left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from relay.errors import InvalidRequest, UnsupportedParameter
from relay.model_alias import ModelAlias
from relay.translate.chat_to_responses import (
    PASSTHROUGH,
    TranslatedRequest,
    client_model_name,
    optional_str,
    parse_reasoning_object,
    reasoning_settings,
    stream_flags,
)
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
    body: Mapping[str, Any], target: ModelAlias, *, reasoning_summaries: bool
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
    user = body.get("user")
    return TranslatedRequest(out, stream, include_usage, client_model, user, "responses")


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
