"""Shared cases of the identity tests (tests/unit/core/test_scope.py,
test_history_digest.py, test_assistant_render.py, test_responses_history.py): a fixed
scope, small messages, and the assertion that digests are the reference encoding."""

from __future__ import annotations

from typing import Any

from relay.core.history_digest import HistoryDigests, history_digests
from relay.core.limits import CanonicalLimits
from relay.core.scope import (
    Scope,
    build_scope,
)
from tests.support.canonical_reference import reference_digests

SECRET = b"s" * 32
BODY: dict[str, Any] = {
    "model": "gpt-5",
    "tools": [{"type": "function", "name": "read", "parameters": {}, "strict": False}],
    "tool_choice": "auto",
    "reasoning": {"effort": "high", "summary": "auto"},
    "max_output_tokens": 1000,
}


def make_scope(body: dict[str, Any] | None = None, **overrides: Any) -> Scope:
    arguments: dict[str, Any] = {
        "secret": SECRET,
        "upstream_origin": "https://api.openai.com",
        "endpoint": "/v1/responses",
        "credential": "sk-one",
        "relay_token": "rr-token",
        "caller": "cursor-user",
        "upstream_body": BODY if body is None else body,
        "openai_beta": None,
    }
    arguments.update(overrides)
    return build_scope(**arguments)


SCOPE = make_scope()


def small_scope(**limits: int) -> Scope:
    return make_scope(limits=CanonicalLimits(**limits))


def call(call_id: str, arguments: str = '{"path":"a.py"}', name: str = "read") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def indexed(call_id: str, index: Any, arguments: str = '{"path":"a.py"}') -> dict[str, Any]:
    return {**call(call_id, arguments), "index": index}


USER = {"role": "user", "content": "read a.py and b.py"}
SYSTEM = {"role": "system", "content": "be brief"}
PREFIX = [SYSTEM, USER]
CALL = call("call_1", "{}")


def end_digest(message: Any, scope: Scope = SCOPE) -> str:
    return history_digests(scope, [*PREFIX, message]).boundaries[-1]


def envelope_fingerprint(message: Any) -> str:
    return history_digests(SCOPE, [message]).assistant_blocks[0].envelope_fingerprint


def assert_reference_digests(history: list[Any], exclude: bool = False) -> HistoryDigests:
    """Every boundary, size and envelope fingerprint is the documented framing of the
    reference encoding of the normalized message; returns the digests."""
    digests = history_digests(SCOPE, history, exclude_reasoning_content=exclude)
    boundaries, sizes, fingerprints = reference_digests(SCOPE, history, exclude)
    assert list(digests.boundaries) == boundaries
    assert list(digests.message_sizes) == sizes
    assert [block.envelope_fingerprint for block in digests.assistant_blocks] == fingerprints
    return digests


def assert_prefix_property(scope: Scope, history: list[Any], digests: HistoryDigests) -> None:
    assert len(digests.boundaries) == len(history) + 1
    for k in range(len(history) + 1):
        assert history_digests(scope, history[:k]).boundaries == digests.boundaries[: k + 1]


def left_the_one_pass_path(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("left the one-pass path")


HISTORY: list[dict[str, Any]] = [
    SYSTEM,
    USER,
    {"role": "assistant", "content": "reading", "tool_calls": [indexed("c1", 0), indexed("c2", 1)]},
    {"role": "tool", "tool_call_id": "c1", "name": "read", "content": "print(1)\n"},
    {"role": "tool", "tool_call_id": "c2", "name": "read", "content": "print(2)\n"},
    {"role": "assistant", "content": [{"type": "text", "text": "both print"}]},
    {"role": "user", "content": [{"type": "text", "text": "thanks"}]},
]


SDK_NULLS = {"refusal": None, "annotations": None, "audio": None, "function_call": None}


def sdk_dump(content: str | None, calls: list[dict[str, Any]] | None) -> dict[str, Any]:
    """``ChatCompletionMessage.model_dump()``: every field, unset ones null."""
    return {"content": content, "role": "assistant", **SDK_NULLS, "tool_calls": calls}
