"""relay.translate.request: a client body, Chat- or Responses-shaped, to the translator
for its shape."""

from __future__ import annotations

from typing import Any

import pytest

from relay.errors import InvalidRequest, UnsupportedParameter
from relay.settings.model_alias import ModelAlias
from relay.translate.chat_to_responses import translate_chat
from relay.translate.request import translate_request
from relay.translate.responses_input import translate_responses_shape

GPT5 = ModelAlias("gpt-5", "gpt-5")
CHAT = {"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "gpt-5", "input": [{"role": "user", "content": "hi"}], "instructions": "i"}


@pytest.mark.parametrize("summaries", [False, True])
def test_a_chat_body_goes_to_the_chat_translator(summaries: bool) -> None:
    got = translate_request(CHAT, GPT5, reasoning_summaries=summaries)
    assert got == translate_chat(CHAT, GPT5, reasoning_summaries=summaries)
    assert got.shape == "chat"


@pytest.mark.parametrize("summaries", [False, True])
def test_a_responses_shaped_body_goes_to_its_own_translator(summaries: bool) -> None:
    got = translate_request(RESPONSES, GPT5, reasoning_summaries=summaries)
    assert got == translate_responses_shape(RESPONSES, GPT5, reasoning_summaries=summaries)
    assert got.shape == "responses"
    assert got.upstream_body["instructions"] == "i"


def test_a_body_with_both_is_chat_shaped_and_its_input_refused() -> None:
    """``messages`` decides the shape; the Chat translator then names ``input`` as a
    parameter it cannot forward (never silently dropped)."""
    with pytest.raises(UnsupportedParameter, match="'input'") as info:
        translate_request({**CHAT, "input": "hi"}, GPT5, reasoning_summaries=False)
    assert info.value.param == "input"


def test_a_body_with_neither_asks_for_messages() -> None:
    with pytest.raises(InvalidRequest, match="'messages' is required") as info:
        translate_request({"model": "gpt-5"}, GPT5, reasoning_summaries=False)
    assert info.value.param == "messages"


@pytest.mark.parametrize("body", [[], "messages", None, 7])
def test_a_body_that_is_not_an_object_is_refused(body: Any) -> None:
    with pytest.raises(InvalidRequest, match="must be a JSON object"):
        translate_request(body, GPT5, reasoning_summaries=False)
