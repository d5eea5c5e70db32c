"""Chat requests for the translation tests (tests/unit/translate): a body, its messages,
and what a user message becomes upstream."""

from __future__ import annotations

from typing import Any

from relay.settings.model_alias import ModelAlias
from relay.translate.request import translate_request
from relay.translate.request_types import TranslatedRequest

GPT5 = ModelAlias("gpt-5", "gpt-5")
GPT4O = ModelAlias("gpt-4o", "gpt-4o")


def translate(
    body: dict[str, Any], target: ModelAlias = GPT5, *, summaries: bool = False
) -> TranslatedRequest:
    return translate_request(body, target, reasoning_summaries=summaries)


def chat(*messages: dict[str, Any], **params: Any) -> dict[str, Any]:
    return {"model": "gpt-5", "messages": list(messages), **params}


def user(text: str = "hi") -> dict[str, Any]:
    return {"role": "user", "content": text}


def user_item(text: str = "hi") -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "input_text", "text": text}]}


def upstream(body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return translate(body, **kwargs).upstream_body
