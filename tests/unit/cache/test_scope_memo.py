"""ReplayCache remembers built scopes (design §21): whatever the order of requests, the
remembered scope is the one ``build_scope`` gives for that request, so two requests share
a scope exactly when their inputs are equal, and a repeat is not rendered again."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relay.cache.replay_cache import SCOPE_MEMO_ENTRIES, UpstreamIdentity
from relay.clock import ManualClock
from relay.core import history_digest
from relay.core.history_digest import history_digests
from relay.core.scope import build_scope
from relay.translate.request import translate_request
from relay.translate.request_types import TranslatedRequest
from tests.support.replay_driver import GPT5, Relay

# Values the configuration takes that JSON spells alike in other languages: 1 and 1.0,
# true and 1, a key order, a nested schema.
TOOL_PARAMETERS = st.sampled_from([
    {"type": "object"},
    {"type": "object", "properties": {"a": {"type": "integer"}}},
    {"properties": {"a": {"type": "integer"}}, "type": "object"},
    {"type": "object", "properties": {"a": {"type": "number", "maximum": 1}}},
    {"type": "object", "properties": {"a": {"type": "number", "maximum": 1.0}}},
    {"type": "object", "properties": {"a": {"type": "number", "maximum": True}}},
])  # fmt: skip
REQUESTS = st.fixed_dictionaries(
    {"tools": st.lists(TOOL_PARAMETERS, max_size=2),
     "user": st.sampled_from([None, "alice", "bob"]),
     "temperature": st.sampled_from([None, 1, 1.0, 0.5])},
)  # fmt: skip
UPSTREAMS = st.sampled_from([
    UpstreamIdentity("https://api.example", "/v1", "sk-one"),
    UpstreamIdentity("https://api.example", "/v1", "sk-two"),
    UpstreamIdentity("https://other.example", "/v1", "sk-one"),
])  # fmt: skip


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[Relay]:
    opened = Relay(tmp_path / "cache.sqlite", ManualClock())
    yield opened
    opened.close()


def translated(fields: dict[str, Any]) -> TranslatedRequest:
    body: dict[str, Any] = {"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]}
    body["tools"] = [
        {"type": "function", "function": {"name": f"t{n}", "parameters": parameters}}
        for n, parameters in enumerate(fields["tools"])
    ] or None
    body |= {key: value for key, value in fields.items() if key != "tools" and value is not None}
    return translate_request({k: v for k, v in body.items() if v is not None}, GPT5,
                             reasoning_summaries=False)  # fmt: skip


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(REQUESTS, UPSTREAMS), min_size=1, max_size=3 * SCOPE_MEMO_ENTRIES))
def test_a_remembered_scope_is_the_built_one(
    relay: Relay, requests: list[tuple[dict[str, Any], UpstreamIdentity]]
) -> None:
    cache = relay.cache
    assert cache.store is not None
    for fields, upstream in requests:
        request = translated(fields)
        built = build_scope(
            secret=cache.store.secret, upstream_origin=upstream.origin,
            endpoint=upstream.endpoint, credential=upstream.credential,
            relay_token=cache._relay_token, caller=request.caller,
            upstream_body=request.upstream_body, openai_beta=None, body_shape=request.shape,
        )  # fmt: skip
        assert cache._scope(request, upstream) == built


def test_a_repeat_is_not_rendered_again(relay: Relay) -> None:
    request = translated({"tools": [{"type": "object"}], "user": None})
    identity = UpstreamIdentity("https://api.example", "/v1", "sk-one")
    first = relay.cache._scope(request, identity)
    assert relay.cache._scope(translated({"tools": [{"type": "object"}]}), identity) is first
    for n in range(SCOPE_MEMO_ENTRIES):  # the oldest is forgotten first
        relay.cache._scope(translated({"tools": [], "user": f"u{n}"}), identity)
    again = relay.cache._scope(request, identity)
    assert again == first and again is not first


def never(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("rendered again")


def test_a_session_s_messages_are_rendered_once(
    relay: Relay, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache's own memo of message renderings (relay.core.rendered_messages): the next
    turn, parsed afresh, renders only its new message and digests as if rendered anew."""
    turn: list[dict[str, Any]] = [
        {"role": "user", "content": "read a.py"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "print(1)"},
    ]  # fmt: skip
    body: dict[str, Any] = {"model": "gpt-5", "messages": turn}
    known = len(relay.cache.rendered)  # the driver's probe
    first = relay.cache.begin(translate_request(body, GPT5, reasoning_summaries=False), body, "r1")
    assert first is not None
    first.abort("test")
    assert len(relay.cache.rendered) == known + len(turn)
    monkeypatch.setattr(history_digest, "render_assistant", never)
    next_body = copy.deepcopy(body)
    next_body["messages"].append({"role": "user", "content": "and b.py"})  # rendered: flat
    request = translate_request(next_body, GPT5, reasoning_summaries=False)
    session = relay.cache.begin(request, next_body, "r2")
    assert session is not None
    monkeypatch.undo()
    scope = relay.cache._scope(request, relay.cache._upstream)
    assert session._history == history_digests(scope, next_body["messages"])
    session.abort("test")
