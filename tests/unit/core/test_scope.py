"""The scope of a visible history (relay.core.scope): what splits scopes and what does
not, fingerprints instead of secrets, limits.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from relay.core.canonical import (
    CanonicalLimitExceeded,
)
from relay.core.history_digest import history_digests
from relay.core.limits import CanonicalLimits
from relay.core.scope import (
    ENCRYPTED_REASONING_INCLUDE,
    fingerprint,
    merged_include,
    scope_config,
)
from tests.support.identity_cases import (
    BODY,
    HISTORY,
    SCOPE,
    SECRET,
    make_scope,
    small_scope,
)

# --- scope ----------------------------------------------------------------------------------

SCOPE_CHANGES: list[tuple[str, dict[str, Any]]] = [
    ("model", {"upstream_body": {**BODY, "model": "gpt-5-mini"}}),
    ("tools", {"upstream_body": {**BODY, "tools": []}}),
    ("tool schema", {"upstream_body": {**BODY, "tools": [{**BODY["tools"][0], "strict": True}]}}),
    ("reasoning", {"upstream_body": {**BODY, "reasoning": {"effort": "low"}}}),
    ("output limit", {"upstream_body": {**BODY, "max_output_tokens": 10}}),
    ("temperature", {"upstream_body": {**BODY, "temperature": 0}}),
    ("include", {"upstream_body": {**BODY, "include": ["message.output_text.logprobs"]}}),
    # Cursor's fields that change what the model reads or writes (design §2, scope)
    (
        "reasoning context",
        {"upstream_body": {**BODY, "reasoning": {**BODY["reasoning"], "context": "all_turns"}}},
    ),
    ("truncation", {"upstream_body": {**BODY, "truncation": "auto"}}),
    ("verbosity", {"upstream_body": {**BODY, "text": {"verbosity": "low"}}}),
    ("credential", {"credential": "sk-two"}),
    ("relay token", {"relay_token": "rr-other"}),
    ("caller", {"caller": "someone-else"}),
    ("no caller", {"caller": None}),
    ("empty caller", {"caller": ""}),
    ("beta header", {"openai_beta": "responses=v1"}),
    ("origin", {"upstream_origin": "https://example.test"}),
    ("endpoint", {"endpoint": "/openai/v1/responses"}),
    ("body shape", {"body_shape": "responses"}),
    ("limits", {"limits": CanonicalLimits(max_messages=100)}),
    ("secret", {"secret": b"t" * 32}),
]


@pytest.mark.parametrize(("name", "change"), SCOPE_CHANGES, ids=[n for n, _ in SCOPE_CHANGES])
def test_scope_changes_change_every_digest(name: str, change: dict[str, Any]) -> None:
    scope = make_scope(**change)
    assert scope.digest != SCOPE.digest
    base = history_digests(SCOPE, HISTORY)
    changed = history_digests(scope, HISTORY)
    assert not set(base.boundaries) & set(changed.boundaries)


SCOPE_KEEPS: list[tuple[str, dict[str, Any]]] = [
    ("stream", {**BODY, "stream": True}),
    ("stream options", {**BODY, "stream": False, "stream_options": {"include_obfuscation": False}}),
    ("store true", {**BODY, "store": True}),
    ("store false", {**BODY, "store": False}),
    ("include the merge adds", {**BODY, "include": [ENCRYPTED_REASONING_INCLUDE]}),
    ("null values", {**BODY, "metadata": None, "temperature": None}),
    ("instructions", {**BODY, "instructions": "be brief"}),
    ("input", {**BODY, "input": [{"role": "user", "content": "x"}]}),
    ("raw user value", {**BODY, "user": "cursor-user"}),
    ("key order", dict(reversed(list(BODY.items())))),
    # the upstream's prompt cache: where and how long, never what the model reads
    ("prompt cache key", {**BODY, "prompt_cache_key": "cursor-conversation-7"}),
    ("prompt cache retention", {**BODY, "prompt_cache_retention": "24h"}),
]


@pytest.mark.parametrize(("name", "body"), SCOPE_KEEPS, ids=[n for n, _ in SCOPE_KEEPS])
def test_transport_and_history_fields_do_not_split_scopes(name: str, body: dict[str, Any]) -> None:
    assert make_scope(body).digest == SCOPE.digest


def test_include_is_merged_deduplicated_and_order_free() -> None:
    assert merged_include(None) == [ENCRYPTED_REASONING_INCLUDE]
    merged = merged_include(["b", ENCRYPTED_REASONING_INCLUDE, "a", "b"])
    assert merged == ["a", "b", ENCRYPTED_REASONING_INCLUDE]
    one = make_scope({**BODY, "include": ["x", "y"]})
    assert make_scope({**BODY, "include": ["y", "x", "y"]}).digest == one.digest


def test_scope_config_is_the_translated_body_minus_transport_and_history() -> None:
    body = {**BODY, "stream": True, "input": [], "instructions": "i", "user": "u", "store": True}
    assert scope_config(body) == {
        "tools": BODY["tools"],
        "tool_choice": "auto",
        "reasoning": {"effort": "high", "summary": "auto"},
        "max_output_tokens": 1000,
        "store": False,
        "include": [ENCRYPTED_REASONING_INCLUDE],
    }


def test_scope_holds_fingerprints_never_raw_secrets() -> None:
    text = json.dumps(SCOPE.value)
    for raw in ("sk-one", "rr-token", "cursor-user"):
        assert raw not in text
    assert SCOPE.targeting.credential == fingerprint(SECRET, "openai-credential", "sk-one")
    assert SCOPE.targeting.caller == fingerprint(SECRET, "caller", "cursor-user")
    assert SCOPE.targeting.model == "gpt-5"
    assert make_scope(caller=None).targeting.caller is None
    # labels separate the fingerprints of equal values
    assert fingerprint(SECRET, "caller", "x") != fingerprint(SECRET, "relay-token", "x")


def test_scope_rejects_a_short_secret_and_a_missing_model() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        make_scope(secret=b"short")
    with pytest.raises(TypeError):
        make_scope({"tools": []})


def test_a_scope_over_the_limits_is_refused() -> None:
    with pytest.raises(CanonicalLimitExceeded):
        small_scope(max_bytes=100)
