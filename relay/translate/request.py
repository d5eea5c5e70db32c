"""A client body, Chat-shaped or Responses-shaped (Cursor sends both), translated for a
Responses upstream: the entry point of relay.translate."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from relay.errors import InvalidRequest
from relay.settings.custom_calls import CustomCallForm
from relay.settings.model_alias import ModelAlias
from relay.translate.chat_to_responses import translate_chat
from relay.translate.request_types import TranslatedRequest
from relay.translate.responses_input import translate_responses_shape


def translate_request(
    body: Mapping[str, Any],
    target: ModelAlias,
    *,
    reasoning_summaries: bool,
    custom_tool_calls: CustomCallForm = "function",
) -> TranslatedRequest:
    """Translate a client body (Chat-shaped, or Cursor's Responses-shaped one) for upstream.
    ``custom_tool_calls`` is the form custom tool calls take in a Responses-shaped
    request's answer (a Chat-shaped one always gets the Chat API's own form)."""
    if not isinstance(body, Mapping):
        raise InvalidRequest("the request body must be a JSON object")
    if "messages" in body:
        return translate_chat(body, target, reasoning_summaries=reasoning_summaries)
    if "input" in body:
        return translate_responses_shape(
            body,
            target,
            reasoning_summaries=reasoning_summaries,
            custom_tool_calls=custom_tool_calls,
        )
    raise InvalidRequest(
        "'messages' is required: send the conversation as an array of chat messages",
        param="messages",
    )
