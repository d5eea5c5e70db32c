"""Scope, prefix digests, prediction and Responses-shaped histories (relay.core)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from relay.core.canonical import CanonicalLimitExceeded, NotCanonicalizable
from relay.core.identity import (
    ENCRYPTED_REASONING_INCLUDE,
    HistoryDigests,
    Scope,
    build_scope,
    fingerprint,
    history_digests,
    merged_include,
    scope_config,
)
from relay.core.limits import CanonicalLimits
from relay.core.predict import SentToolCall, predict_envelope, reserialize_arguments
from relay.core.responses_history import visible_messages_from_responses_input
from tests.support import recordings

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


def call(call_id: str, arguments: str = '{"path":"a.py"}', name: str = "read") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def indexed(call_id: str, index: Any, arguments: str = '{"path":"a.py"}') -> dict[str, Any]:
    return {**call(call_id, arguments), "index": index}


USER = {"role": "user", "content": "read a.py and b.py"}
SYSTEM = {"role": "system", "content": "be brief"}


def end_digest(message: Any, scope: Scope = SCOPE) -> str:
    return history_digests(scope, [SYSTEM, USER, message]).boundaries[-1]


def envelope_fingerprint(message: Any) -> str:
    return history_digests(SCOPE, [message]).assistant_blocks[0].envelope_fingerprint


# --- equivalent and different envelopes -------------------------------------------------

EQUIVALENT: list[tuple[str, list[dict[str, Any]]]] = [
    (
        "string vs text parts vs split parts",
        [
            {"role": "assistant", "content": "hello world"},
            {"role": "assistant", "content": [{"type": "text", "text": "hello world"}]},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "world"}],
            },
            {"role": "assistant", "content": "hello world", "tool_calls": []},
        ],
    ),
    (
        "null vs absent vs empty content",
        [
            {"role": "assistant", "content": None, "tool_calls": [call("c1")]},
            {"role": "assistant", "tool_calls": [call("c1")]},
            {"role": "assistant", "content": "", "tool_calls": [call("c1")]},
            {"role": "assistant", "content": [], "tool_calls": [call("c1")]},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": ""}],
                "tool_calls": [call("c1")],
            },
        ],
    ),
    (
        "absent vs empty vs null tool_calls",
        [
            {"role": "assistant", "content": "done"},
            {"role": "assistant", "content": "done", "tool_calls": []},
            {"role": "assistant", "content": "done", "tool_calls": None},
        ],
    ),
    (
        "null or empty fields that carry nothing vs absent",
        [
            {"role": "assistant", "content": "done"},
            {"role": "assistant", "content": "done", "refusal": None},
            {"role": "assistant", "content": "done", "refusal": ""},
            {"role": "assistant", "content": "done", "annotations": []},
            {"role": "assistant", "content": "done", "annotations": None},
            {"role": "assistant", "content": "done", "audio": None},
            {"role": "assistant", "content": "done", "function_call": None},
            {  # the official Python SDK's message.model_dump() of an answer
                "content": "done",
                "refusal": None,
                "role": "assistant",
                "annotations": None,
                "audio": None,
                "function_call": None,
                "tool_calls": None,
            },
        ],
    ),
    (
        "index equal to position dropped",
        [
            {"role": "assistant", "content": "x", "tool_calls": [call("c1"), call("c2")]},
            {
                "role": "assistant",
                "content": "x",
                "tool_calls": [indexed("c1", 0), indexed("c2", 1)],
            },
            {"role": "assistant", "content": "x", "tool_calls": [call("c1"), indexed("c2", 1)]},
        ],
    ),
    (
        "member order",
        [
            {"role": "assistant", "content": "x", "tool_calls": [call("c1")]},
            {"tool_calls": [call("c1")], "content": "x", "role": "assistant"},
        ],
    ),
]


@pytest.mark.parametrize(("name", "forms"), EQUIVALENT, ids=[name for name, _ in EQUIVALENT])
def test_equivalent_envelope_forms_hash_equal(name: str, forms: list[dict[str, Any]]) -> None:
    assert len({end_digest(form) for form in forms}) == 1
    assert len({envelope_fingerprint(form) for form in forms}) == 1


DIFFERENT: list[tuple[str, Any, Any]] = [
    (
        "index not equal to position",
        {"role": "assistant", "content": "x", "tool_calls": [call("c1"), call("c2")]},
        {"role": "assistant", "content": "x", "tool_calls": [indexed("c1", 1), indexed("c2", 0)]},
    ),
    (
        "argument spelling",
        {"role": "assistant", "tool_calls": [call("c1", '{"path":"a.py"}')]},
        {"role": "assistant", "tool_calls": [call("c1", '{"path": "a.py"}')]},
    ),
    (
        "argument number spelling",
        {"role": "assistant", "tool_calls": [call("c1", '{"n":1}')]},
        {"role": "assistant", "tool_calls": [call("c1", '{"n":1.0}')]},
    ),
    (
        "tool-call id",
        {"role": "assistant", "tool_calls": [call("c1")]},
        {"role": "assistant", "tool_calls": [call("c2")]},
    ),
    (
        "text prefix vs full text",
        {"role": "assistant", "content": "hello"},
        {"role": "assistant", "content": "hello world"},
    ),
    (
        "partial set of tool calls vs full set",
        {"role": "assistant", "content": "x", "tool_calls": [call("c1")]},
        {"role": "assistant", "content": "x", "tool_calls": [call("c1"), call("c2")]},
    ),
    (
        "tool calls in another order",
        {"role": "assistant", "tool_calls": [call("c1"), call("c2")]},
        {"role": "assistant", "tool_calls": [call("c2"), call("c1")]},
    ),
    (
        "extra unknown field",
        {"role": "assistant", "content": "x"},
        {"role": "assistant", "content": "x", "metadata": None},
    ),
    (
        "audio present",
        {"role": "assistant", "content": "x"},
        {"role": "assistant", "content": "x", "audio": {"id": "audio_1"}},
    ),
    (
        "function_call present",
        {"role": "assistant", "content": "x"},
        {"role": "assistant", "content": "x", "function_call": {"name": "f", "arguments": "{}"}},
    ),
    (
        "annotations present",
        {"role": "assistant", "content": "x"},
        {"role": "assistant", "content": "x", "annotations": [{"type": "url_citation"}]},
    ),
    (
        "assistant name present",
        {"role": "assistant", "content": "x"},
        {"role": "assistant", "content": "x", "name": ""},
    ),
    (
        "null fields of other roles stay",
        {"role": "user", "content": "x"},
        {"role": "user", "content": "x", "refusal": None},
    ),
    (
        "unknown field inside a tool call",
        {"role": "assistant", "tool_calls": [call("c1")]},
        {"role": "assistant", "tool_calls": [{**call("c1"), "extra": 1}]},
    ),
    (
        "refusal present",
        {"role": "assistant", "content": ""},
        {"role": "assistant", "content": "", "refusal": "I can't"},
    ),
    (
        "reasoning_content kept by default",
        {"role": "assistant", "content": "x"},
        {"role": "assistant", "content": "x", "reasoning_content": "thinking"},
    ),
    (
        "text part with annotations is not an exact text part",
        {"role": "assistant", "content": "x"},
        {"role": "assistant", "content": [{"type": "text", "text": "x", "annotations": []}]},
    ),
    (
        "user string vs parts",
        {"role": "user", "content": "hi"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    ),
    (
        "tool name present vs absent",
        {"role": "tool", "tool_call_id": "c1", "content": "ok", "name": "read"},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ),
    (
        "tool string vs parts",
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "ok"}]},
    ),
    (
        "system null vs empty content",
        {"role": "system", "content": ""},
        {"role": "system", "content": None},
    ),
]


@pytest.mark.parametrize(("name", "one", "other"), DIFFERENT, ids=[d[0] for d in DIFFERENT])
def test_different_envelopes_differ(name: str, one: Any, other: Any) -> None:
    assert end_digest(one) != end_digest(other)
    if one.get("role") == "assistant":
        assert envelope_fingerprint(one) != envelope_fingerprint(other)


def test_a_message_never_matches_the_pair_it_could_be_split_into() -> None:
    joined = history_digests(SCOPE, [USER, {"role": "assistant", "content": "ab"}])
    split = history_digests(
        SCOPE, [USER, {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]
    )
    assert joined.boundaries[-1] not in split.boundaries


def test_reasoning_content_excluded_on_request_with_its_own_digests() -> None:
    plain = {"role": "assistant", "content": "x"}
    with_rc = {**plain, "reasoning_content": "thinking"}
    excluded = [
        history_digests(SCOPE, [USER, m], exclude_reasoning_content=True) for m in (plain, with_rc)
    ]
    assert excluded[0].boundaries == excluded[1].boundaries
    assert excluded[0].assistant_blocks == excluded[1].assistant_blocks
    # the two keyings never share a digest, not even the scope-only boundary
    default = history_digests(SCOPE, [USER, plain])
    assert not set(default.boundaries) & set(excluded[0].boundaries)
    assert (
        default.assistant_blocks[0].envelope_fingerprint
        != excluded[0].assistant_blocks[0].envelope_fingerprint
    )


# --- prefix digests ----------------------------------------------------------------------

HISTORY: list[dict[str, Any]] = [
    SYSTEM,
    USER,
    {"role": "assistant", "content": "reading", "tool_calls": [indexed("c1", 0), indexed("c2", 1)]},
    {"role": "tool", "tool_call_id": "c1", "name": "read", "content": "print(1)\n"},
    {"role": "tool", "tool_call_id": "c2", "name": "read", "content": "print(2)\n"},
    {"role": "assistant", "content": [{"type": "text", "text": "both print"}]},
    {"role": "user", "content": [{"type": "text", "text": "thanks"}]},
]


def assert_prefix_property(scope: Scope, history: list[Any], digests: HistoryDigests) -> None:
    assert len(digests.boundaries) == len(history) + 1
    for k in range(len(history) + 1):
        assert history_digests(scope, history[:k]).boundaries == digests.boundaries[: k + 1]


def test_prefix_digests_match_at_every_boundary() -> None:
    digests = history_digests(SCOPE, HISTORY)
    assert_prefix_property(SCOPE, HISTORY, digests)
    assert len(set(digests.boundaries)) == len(digests.boundaries)


def test_boundary_zero_is_the_scope_alone() -> None:
    assert history_digests(SCOPE, []).boundaries == history_digests(SCOPE, HISTORY).boundaries[:1]
    assert SCOPE.digest != history_digests(SCOPE, []).boundaries[0]  # different domain tags


def test_assistant_blocks_name_their_boundaries() -> None:
    digests = history_digests(SCOPE, HISTORY)
    assert [block.position for block in digests.assistant_blocks] == [2, 5]
    for block in digests.assistant_blocks:
        assert block.start_digest == digests.boundaries[block.position]
        assert block.end_digest == digests.boundaries[block.position + 1]
    # the envelope fingerprint is independent of position and scope
    alone = history_digests(make_scope(credential="sk-other"), [HISTORY[5]])
    assert alone.assistant_blocks[0].envelope_fingerprint == (
        digests.assistant_blocks[1].envelope_fingerprint
    )


def test_sizes_and_budget_are_reported() -> None:
    digests = history_digests(SCOPE, HISTORY)
    assert len(digests.message_sizes) == len(HISTORY)
    assert digests.bytes_used == SCOPE.canonical_size + sum(digests.message_sizes)
    assert digests.final_state.position == len(HISTORY)
    assert digests.final_state.digest == digests.boundaries[-1]


def test_input_messages_are_not_modified() -> None:
    history = copy.deepcopy(HISTORY)
    history_digests(SCOPE, history)
    assert history == HISTORY


# --- limits are decided before anything is hashed -------------------------------------------


def small_scope(**limits: int) -> Scope:
    return make_scope(limits=CanonicalLimits(**limits))


def padded_history(count: int, last: Any) -> list[Any]:
    return [{"role": "user", "content": f"m{i}"} for i in range(count)] + [last]


@pytest.mark.parametrize(
    ("limits", "history", "reason"),
    [
        ({"max_messages": 5}, padded_history(5, USER), "messages"),
        # the scope alone: 700 bytes, 31 nodes, depth 5; ten padding messages: 300 bytes, 30 nodes
        ({"max_bytes": 3000}, padded_history(10, {"role": "user", "content": "x" * 2000}), "bytes"),
        (
            {"max_nodes": 100},
            padded_history(10, {"role": "user", "content": list(range(60))}),
            "nodes",
        ),
        (
            {"max_depth": 6},
            padded_history(10, {"role": "user", "content": [[[[[["x"]]]]]]}),
            "depth",
        ),
    ],
)
def test_a_history_over_a_limit_is_refused_before_emission(
    hashed: list[bool], limits: dict[str, int], history: list[Any], reason: str
) -> None:
    scope = small_scope(**limits)
    history_digests(scope, history[:-1])  # everything but the last message fits
    hashed.clear()
    with pytest.raises(CanonicalLimitExceeded) as refused:
        history_digests(scope, history)
    assert refused.value.reason == reason
    assert hashed == []


LONE = "\ud800"  # no UTF-8 form; json.loads makes it from "\\ud800"


@pytest.mark.parametrize(
    ("last", "reason"),
    [
        ({"role": "user", "content": [{"type": "text", "text": "x", "n": float("nan")}]},
         "number"),
        # Each one-pass renderer meets the surrogate (flat user/tool messages, the plain and
        # one-call assistant envelopes, the general envelope) and refuses like measure().
        ({"role": "user", "content": f"a{LONE}"}, "string"),
        ({"role": "tool", "tool_call_id": "c", "content": LONE}, "string"),
        ({"role": "user", LONE: "x"}, "string"),
        ({"role": "assistant", "content": LONE}, "string"),
        ({"role": "assistant", "content": "", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": LONE}}]},
         "string"),
        ({"role": "assistant", "content": "", "reasoning_content": LONE}, "string"),
        ({"role": "assistant", "content": "x" * 70_000 + LONE}, "string"),  # streamed path
    ],
)  # fmt: skip
def test_a_value_the_format_cannot_carry_is_refused_before_emission(
    hashed: list[bool], last: dict[str, Any], reason: str
) -> None:
    with pytest.raises(NotCanonicalizable) as refused:
        history_digests(SCOPE, [*HISTORY, last])
    assert refused.value.reason == reason
    assert hashed == []


def test_scope_and_history_share_the_byte_budget() -> None:
    history = [{"role": "user", "content": "x" * 1000}]
    scope = small_scope(max_bytes=1800)
    assert history_digests(scope, history).bytes_used <= 1800
    big_body = {**BODY, "tools": [{"type": "function", "name": "t" * 200, "parameters": {}}]}
    big_scope = make_scope(big_body, limits=CanonicalLimits(max_bytes=1800))
    with pytest.raises(CanonicalLimitExceeded):
        history_digests(big_scope, history)


def test_a_scope_over_the_limits_is_refused() -> None:
    with pytest.raises(CanonicalLimitExceeded):
        small_scope(max_bytes=100)


# --- scope ----------------------------------------------------------------------------------

SCOPE_CHANGES: list[tuple[str, dict[str, Any]]] = [
    ("model", {"upstream_body": {**BODY, "model": "gpt-5-mini"}}),
    ("tools", {"upstream_body": {**BODY, "tools": []}}),
    ("tool schema", {"upstream_body": {**BODY, "tools": [{**BODY["tools"][0], "strict": True}]}}),
    ("reasoning", {"upstream_body": {**BODY, "reasoning": {"effort": "low"}}}),
    ("output limit", {"upstream_body": {**BODY, "max_output_tokens": 10}}),
    ("temperature", {"upstream_body": {**BODY, "temperature": 0}}),
    ("include", {"upstream_body": {**BODY, "include": ["message.output_text.logprobs"]}}),
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


# --- extending a saved state with a prediction ---------------------------------------------


def test_extending_the_final_state_equals_hashing_the_longer_history() -> None:
    digests = history_digests(SCOPE, HISTORY)
    envelope = {"role": "assistant", "content": "next", "tool_calls": [call("c9")]}
    key, state = digests.final_state.extend(envelope)
    longer = history_digests(SCOPE, [*HISTORY, envelope])
    assert key == longer.assistant_blocks[-1]
    assert key.position == len(HISTORY)
    assert state.digest == longer.boundaries[-1]
    assert state.bytes_used == longer.bytes_used
    # the saved state is not consumed: extending twice gives the same answer
    assert digests.final_state.extend(envelope)[0] == key
    follow_up = {"role": "user", "content": "more"}
    assert state.extend({"role": "assistant", "content": "z"})[0].start_digest == state.digest
    assert history_digests(SCOPE, [*HISTORY, envelope, follow_up]).boundaries[-2] == state.digest


def test_extending_respects_the_limits() -> None:
    scope = small_scope(max_messages=len(HISTORY))
    state = history_digests(scope, HISTORY).final_state
    with pytest.raises(CanonicalLimitExceeded) as refused:
        state.extend({"role": "assistant", "content": "x"})
    assert refused.value.reason == "messages"
    with pytest.raises(ValueError, match="assistant"):
        history_digests(SCOPE, HISTORY).final_state.extend({"role": "user", "content": "x"})


# --- prediction ------------------------------------------------------------------------------


def echoes(text: str, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Forms a client may send the assistant message back in."""
    with_index = [{**c, "index": i} for i, c in enumerate(calls)]
    forms: list[dict[str, Any]] = [
        {"role": "assistant", "content": text, "tool_calls": with_index},
        {"role": "assistant", "content": [{"type": "text", "text": text}], "tool_calls": calls},
    ]
    if not text:
        forms.append({"role": "assistant", "content": None, "tool_calls": with_index})
        forms.append({"role": "assistant", "tool_calls": calls})
    if not calls:
        forms.append({"role": "assistant", "content": text})
    return forms


@pytest.mark.parametrize(
    ("text", "sent"),
    [
        ("Hello!", []),
        ("", [SentToolCall("call_1", "read", '{"path":"a.py","lines":[1,20]}')]),
        (
            "Reading both.",
            [
                SentToolCall("call_1", "grep", '{"pattern":"foo","n":-3,"x":0.5,"u":"\u00e9"}'),
                SentToolCall("call_2", "grep", '{"pattern":"bar","flag":true,"none":null}'),
            ],
        ),
    ],
)
def test_prediction_round_trips_with_what_the_client_sends_back(
    text: str, sent: list[SentToolCall]
) -> None:
    envelope = predict_envelope(text, sent)
    assert envelope is not None
    key, _ = history_digests(SCOPE, HISTORY).final_state.extend(envelope)
    calls = [call(c.id, c.arguments, c.name) for c in sent]
    for form in echoes(text, calls):
        nxt = history_digests(SCOPE, [*HISTORY, form, {"role": "user", "content": "go on"}])
        assert nxt.assistant_blocks[-1] == key


def test_prediction_reserializes_arguments_compactly() -> None:
    envelope = predict_envelope(
        "", [SentToolCall("c", "f", ' { "b" : [1, 2],\n "a": "\u00e9\\n" } ')]
    )
    assert envelope is not None
    assert envelope["tool_calls"][0]["function"]["arguments"] == '{"b":[1,2],"a":"\u00e9\\n"}'


@pytest.mark.parametrize(
    "arguments",
    [
        '{"n":9007199254740992}',  # 2**53: beyond the safe integers
        '{"n":-9007199254740992}',
        '{"n":12345678901234567890}',
        '{"n":1.0}',
        '{"n":2.50}',
        '{"n":1e5}',
        '{"n":1E-7}',
        '{"n":1.5e3}',
        '{"n":-0}',
        '{"n":-0.0}',
        '{"n":0.00001}',  # Python and JavaScript print it differently
        '{"n":0.1000000000000000055511151231257827}',
        '{"n":NaN}',
        '{"n":Infinity}',
        '{"a":1,"a":2}',
        '{"b":1,"1":2}',  # JavaScript moves index-like keys first
        '{"s":"\\ud800"}',
        "not json",
        "",
        '{"a":1} trailing',
        "[" * 100_000 + "]" * 100_000,
    ],
)
def test_prediction_rejects_arguments_the_client_may_respell(arguments: str) -> None:
    assert reserialize_arguments(arguments) is None
    assert predict_envelope("text", [SentToolCall("c", "f", arguments)]) is None


@pytest.mark.parametrize(
    "arguments",
    ['{"n":9007199254740991}', '{"n":-9007199254740991}', '{"n":0}', '{"n":-1.5}', '{"n":123.456}',
     '{"n":0.0001}', "[]", '"text"', "42", '{"key10":1,"01":2,"-1":3}'],
)  # fmt: skip
def test_prediction_keeps_safe_spellings(arguments: str) -> None:
    assert reserialize_arguments(arguments) == arguments


def test_a_refusal_is_an_unknown_prediction() -> None:
    assert predict_envelope("", [], refusal="I can't help with that.") is None


# --- Responses-shaped bodies ----------------------------------------------------------------

FUNCTION_CALL = {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "ok"}


def assistant_item(text: str, **extra: Any) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, **extra}
    return {"type": "message", "role": "assistant", "content": [part]}


def test_a_responses_shaped_history_maps_to_chat_envelopes() -> None:
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        assistant_item("reading", annotations=[]),
        FUNCTION_CALL,
        {**FUNCTION_CALL, "call_id": "c2"},
        OUTPUT,
        {**OUTPUT, "call_id": "c2"},
        FUNCTION_CALL,
        OUTPUT,
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "d"}]},
        {"role": "user", "content": "thanks"},
    ]
    tool_call = call("c1", "{}")
    assert visible_messages_from_responses_input(items, "be brief") == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": "reading", "tool_calls": [tool_call, call("c2", "{}")]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "tool", "tool_call_id": "c2", "content": "ok"},
        {"role": "assistant", "content": "", "tool_calls": [tool_call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "developer", "content": [{"type": "text", "text": "d"}]},
        {"role": "user", "content": "thanks"},
    ]


def test_a_string_input_is_one_user_message() -> None:
    assert visible_messages_from_responses_input("hi", None) == [{"role": "user", "content": "hi"}]


def test_instructions_never_collide_with_an_input_system_message() -> None:
    with_instructions = visible_messages_from_responses_input("hi", "rules")
    system_item = {"role": "system", "content": [{"type": "input_text", "text": "rules"}]}
    as_item = visible_messages_from_responses_input(
        [system_item, {"role": "user", "content": "hi"}], None
    )
    assert with_instructions != as_item
    assert (
        visible_messages_from_responses_input([{"role": "system", "content": "rules"}], None)
        is None
    )


def test_a_prediction_matches_the_responses_shaped_echo() -> None:
    sent = [SentToolCall("c1", "read", "{}")]
    envelope = predict_envelope("reading", sent)
    assert envelope is not None
    scope = make_scope(body_shape="responses")
    before = visible_messages_from_responses_input([{"role": "user", "content": "hi"}], "rules")
    assert before is not None
    key, _ = history_digests(scope, before).final_state.extend(envelope)
    items = [{"role": "user", "content": "hi"}, assistant_item("reading"), FUNCTION_CALL, OUTPUT]
    after = visible_messages_from_responses_input(items, "rules")
    assert after is not None
    assert history_digests(scope, after).assistant_blocks[0] == key


@pytest.mark.parametrize(
    "items",
    [
        [{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}],
        [{"role": "user", "content": [{"type": "input_text", "text": "x", "extra": 1}]}],
        [{"role": "user", "content": []}],
        [{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"}],
        [{"type": "item_reference", "id": "msg_1"}],
        [{"type": "web_search_call", "id": "ws_1"}],
        [{"role": "assistant", "content": "plain string"}],
        [{"role": "assistant", "content": []}],
        [assistant_item("")],
        [assistant_item("x", annotations=[{"type": "url_citation"}])],
        [{"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}],
        [{"role": "assistant", "content": [
            {"type": "output_text", "text": "a"}, {"type": "output_text", "text": "b"}]}],
        [{**assistant_item("x"), "id": "msg_1", "status": "completed"}],
        [{**FUNCTION_CALL, "id": "fc_1"}],
        [{**FUNCTION_CALL, "status": "completed"}],
        [{**FUNCTION_CALL, "arguments": {}}],
        [{**OUTPUT, "output": [{"type": "input_text", "text": "ok"}]}],
        [{"role": "system", "content": "collides with instructions"}],
        [{"role": "critic", "content": "x"}],
        [{"content": "no role"}],
        ["not an item"],
        {"role": "user"},
        None,
    ],
)  # fmt: skip
def test_inexact_responses_input_is_underivable(items: Any) -> None:
    assert visible_messages_from_responses_input(items, None) is None


def test_non_string_instructions_are_underivable() -> None:
    assert visible_messages_from_responses_input("hi", ["rules"]) is None


# --- real Cursor recordings ------------------------------------------------------------------


def recorded_requests() -> list[tuple[str, dict[str, Any]]]:
    return [(path.name, recordings.load_request(path)) for path in recordings.folders()]


def strip_cursor_forms(message: dict[str, Any]) -> dict[str, Any]:
    """An assistant message in parts form without ``index``: another equivalent form."""
    if message["role"] != "assistant":
        return message
    calls = [{k: v for k, v in c.items() if k != "index"} for c in message.get("tool_calls", [])]
    text = [{"type": "text", "text": message["content"] or ""}]
    return {**message, "content": text, "tool_calls": calls}


@pytest.mark.parametrize(
    ("name", "body"), recorded_requests(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_recorded_cursor_histories(name: str, body: dict[str, Any]) -> None:
    messages = body["messages"]
    scope = make_scope({"model": body["model"], "tools": body.get("tools") or []})
    digests = history_digests(scope, messages)
    assert_prefix_property(scope, messages, digests)
    assistant_positions = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    assert [b.position for b in digests.assistant_blocks] == assistant_positions
    # Cursor's redundant index values and string content hash like the other forms
    rewritten = [strip_cursor_forms(message) for message in messages]
    assert history_digests(scope, rewritten).boundaries == digests.boundaries
    # and each recorded assistant envelope is what a prediction of its sent output gives
    for position in assistant_positions:
        message = messages[position]
        sent = [
            SentToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
            for c in message.get("tool_calls", [])
        ]
        envelope = predict_envelope(message["content"] or "", sent)
        assert envelope is not None
        before = history_digests(scope, messages[:position]).final_state
        assert (
            before.extend(envelope)[0]
            == digests.assistant_blocks[assistant_positions.index(position)]
        )


def test_responses_input_spans_cover_each_visible_message() -> None:
    from relay.core.responses_history import visible_history_from_responses_input

    items = [
        {"role": "user", "content": "hi"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "t"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "r1"},
        {"type": "function_call_output", "call_id": "c2", "output": "r2"},
        {"type": "function_call", "call_id": "c3", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c3", "output": "r3"},
    ]
    history = visible_history_from_responses_input(items, "rules")
    assert history is not None
    messages, spans = history
    assert [m["role"] for m in messages] == [
        "system", "user", "assistant", "tool", "tool", "assistant", "tool",
    ]  # fmt: skip
    assert spans == (None, (0, 1), (1, 4), (4, 5), (5, 6), (6, 7), (7, 8))
    assert visible_history_from_responses_input("hi", None) == (
        [{"role": "user", "content": "hi"}],
        (None,),
    )


def test_first_answers_name_the_first_tool_message_of_each_call() -> None:
    tool = {"role": "tool", "content": "x"}
    messages = [
        USER,
        {**tool, "tool_call_id": "b"},
        {**tool, "tool_call_id": "a"},
        {**tool, "tool_call_id": "b"},  # a later answer to b: the first one counts
        {**tool, "tool_call_id": 7},  # not a call id
        {"role": "user", "tool_call_id": "c", "content": "x"},  # not a tool message
        tool,
    ]
    assert history_digests(SCOPE, messages).first_answers == {"b": 1, "a": 2}
