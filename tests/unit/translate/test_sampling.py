"""relay.translate.sampling: which models get temperature/top_p, and validation."""

from __future__ import annotations

from typing import Any

import pytest

from relay.errors import InvalidRequest
from relay.translate.sampling import is_reasoning_model, sampling_params


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-5", True),
        ("GPT-5", True),
        ("gpt-5-mini", True),
        ("gpt-5-nano-2025-08-07", True),
        ("gpt-5.1", True),
        ("gpt-5-codex", True),
        ("openai/gpt-5", True),
        ("azure/openai/gpt-5-2025-08-07", True),
        ("gpt-5-chat-latest", False),
        ("openai/gpt-5-chat", False),
        ("o1", True),
        ("o1-mini", True),
        ("o3", True),
        ("o3-pro-2025-06-10", True),
        ("o4-mini", True),
        ("codex-mini-latest", True),
        ("gpt-4o", False),
        ("gpt-4.1-mini", False),
        ("gpt-50", False),
        ("o10", False),
        ("omni-moderation-latest", False),
        ("my-codex-thing", False),
        ("", False),
    ],
)
def test_is_reasoning_model(model: str, expected: bool) -> None:
    assert is_reasoning_model(model) is expected


@pytest.mark.parametrize(
    ("body", "model", "policy", "expected"),
    [
        # auto: reasoning models keep only the default 1
        ({"temperature": 0}, "gpt-5", "auto", {}),
        ({"temperature": 1}, "gpt-5", "auto", {"temperature": 1}),
        ({"temperature": 1.0, "top_p": 0.5}, "o3", "auto", {"temperature": 1.0}),
        ({"top_p": 1}, "o4-mini", "auto", {"top_p": 1}),
        # auto: other models get what was sent
        ({"temperature": 0, "top_p": 0.9}, "gpt-4o", "auto", {"temperature": 0, "top_p": 0.9}),
        ({"temperature": 0}, "gpt-5-chat-latest", "auto", {"temperature": 0}),
        # forward / drop ignore the model family
        ({"temperature": 0}, "gpt-5", "forward", {"temperature": 0}),
        ({"temperature": 0.7, "top_p": 0.3}, "gpt-4o", "drop", {}),
        # null means absent
        ({"temperature": None, "top_p": None}, "gpt-4o", "forward", {}),
        ({}, "gpt-5", "auto", {}),
        # boundaries
        ({"temperature": 2, "top_p": 0}, "gpt-4o", "auto", {"temperature": 2, "top_p": 0}),
    ],
)
def test_sampling_params(
    body: dict[str, Any], model: str, policy: str, expected: dict[str, Any]
) -> None:
    assert sampling_params(body, model, policy) == expected


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": "0"}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 1.01}, "top_p"),
        ({"top_p": [1]}, "top_p"),
    ],
)
@pytest.mark.parametrize("policy", ["auto", "forward", "drop"])
def test_invalid_sampling_values_are_client_errors(
    body: dict[str, Any], param: str, policy: str
) -> None:
    with pytest.raises(InvalidRequest) as info:
        sampling_params(body, "gpt-4o", policy)
    assert info.value.param == param
    assert param in info.value.message


def test_unknown_policy_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="sampling policy"):
        sampling_params({}, "gpt-5", "sometimes")
