"""Prefix digests of the visible history (relay.core.history_digest): equivalent and
different envelopes, the null and empty assistant fields that carry nothing (issue 16),
prefix digests and their properties, refusals decided before anything is hashed,
extending a saved state with a prediction, and real Cursor histories. Whichever renderer a
message takes, its bytes must be the reference encoding of its normalized form
(``tests.support.canonical_reference``), framed as documented.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.core.canonical import (
    CanonicalLimitExceeded,
    NotCanonicalizable,
    canonical_bytes,
)
from relay.core.envelope import NULLISH, normalize_assistant, normalize_message
from relay.core.history_digest import history_digests
from relay.core.limits import CanonicalLimits
from relay.core.predict import SentToolCall, predict_envelope, predict_envelopes
from relay.core.responses_history import visible_messages_from_responses_input
from relay.settings.model_alias import ModelAlias
from relay.translate.request import translate_request
from tests.support import recordings
from tests.support.identity_cases import (
    BODY,
    CALL,
    HISTORY,
    PREFIX,
    SCOPE,
    USER,
    assert_prefix_property,
    assert_reference_digests,
    call,
    end_digest,
    envelope_fingerprint,
    indexed,
    make_scope,
    sdk_dump,
    small_scope,
)
from tests.support.json_values import json_values, text

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


# --- null and empty assistant fields carry nothing (issue 16) ------------------------------
# An assistant message echoed exactly as the JSON answer returned it -- the official Python
# SDK's ``message.model_dump()``, a script resending the ``message`` it received, a curl
# user -- has ``refusal: null`` and, from the SDK, ``annotations``, ``audio``,
# ``function_call`` and ``tool_calls`` as ``null`` too. Each must hash as the plain
# ``{"role", "content"}`` (and as the prediction capture records), on the one-pass paths
# as on the general one; a non-empty value stays in the identity.

GPT5 = ModelAlias("gpt-5", "gpt-5")


def predicted_end(text: str, calls: tuple[SentToolCall, ...] = ()) -> str:
    """Where capture records the answer: the request's history extended with the
    prediction (the respelled envelope)."""
    envelopes = predict_envelopes(text, calls)
    assert envelopes is not None
    state = history_digests(SCOPE, PREFIX).final_state
    return state.extend(envelopes[0])[0].end_digest


ECHOES = [
    ("sdk model_dump, text", sdk_dump("done", None), "done", ()),
    ("sdk model_dump, a call", sdk_dump(None, [CALL]), "", (SentToolCall("call_1", "read", "{}"),)),
    ("relay json answer", {"role": "assistant", "content": "done", "refusal": None}, "done", ()),
    (
        "relay json answer, a call",
        {"role": "assistant", "content": None, "refusal": None, "tool_calls": [CALL]},
        "",
        (SentToolCall("call_1", "read", "{}"),),
    ),
    (
        "openai api answer",
        {"role": "assistant", "content": "done", "refusal": None, "annotations": []},
        "done",
        (),
    ),
    ("empty refusal", {"role": "assistant", "content": "done", "refusal": ""}, "done", ()),
    ("null tool_calls", {"role": "assistant", "content": "done", "tool_calls": None}, "done", ()),
]


@pytest.mark.parametrize(
    ("name", "echo", "text", "calls"), ECHOES, ids=[name for name, *_ in ECHOES]
)
def test_an_echo_of_the_answer_hashes_where_capture_records_it(
    name: str, echo: dict[str, Any], text: str, calls: tuple[SentToolCall, ...]
) -> None:
    plain: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        plain["tool_calls"] = [CALL]
    assert end_digest(echo) == end_digest(plain) == predicted_end(text, calls)
    assert normalize_assistant(echo) == normalize_assistant(plain)
    # ... and translation sends the same upstream items for it (nothing visible differs).
    sent = [
        translate_request({"model": "gpt-5", "messages": [USER, message]}, GPT5,
                          reasoning_summaries=False).upstream_body["input"]
        for message in (echo, plain)
    ]  # fmt: skip
    assert sent[0] == sent[1]


KEPT = [
    ("refusal text", {"refusal": "I can't help with that."}),
    ("annotations", {"annotations": [{"type": "url_citation", "url_citation": {}}]}),
    ("audio", {"audio": {"id": "audio_1"}}),
    ("function_call", {"function_call": {"name": "read", "arguments": "{}"}}),
    ("refusal false", {"refusal": False}),  # not null, not a string: not nothing
    ("annotations empty object", {"annotations": {}}),
    ("audio empty object", {"audio": {}}),
    ("audio empty string", {"audio": ""}),
    ("unknown null field", {"metadata": None}),
    ("reasoning_content null", {"reasoning_content": None}),  # outside the Chat schema
    ("name null", {"name": None}),  # never null in the schema
]


@pytest.mark.parametrize(("name", "extra"), KEPT, ids=[name for name, _ in KEPT])
def test_a_field_that_carries_something_stays_in_the_identity(
    name: str, extra: dict[str, Any]
) -> None:
    plain = {"role": "assistant", "content": "done"}
    assert end_digest({**plain, **extra}) != end_digest(plain)
    assert normalize_assistant({**plain, **extra}) == {**normalize_assistant(plain), **extra}


@pytest.mark.parametrize("role", ["user", "system", "developer", "tool"])
def test_other_roles_keep_their_null_fields(role: str) -> None:
    message = {"role": role, "content": "x", "tool_call_id": "c", "refusal": None, "name": None}
    assert normalize_message(message) is message
    assert end_digest(message) != end_digest({k: v for k, v in message.items() if v is not None})


def test_normalization_drops_exactly_the_listed_fields() -> None:
    """The table is the Chat assistant message's nullable fields besides content and
    tool_calls (the SDK's ChatCompletionMessage and ChatCompletionAssistantMessageParam)."""
    assert set(NULLISH) == {"refusal", "annotations", "audio", "function_call"}
    assert normalize_assistant(sdk_dump(None, None)) == {
        "role": "assistant",
        "content": "",
        "tool_calls": [],
    }


NULLISH_VALUES = {
    "refusal": st.sampled_from([None, "", "no", False, 0]),
    "annotations": st.sampled_from([None, [], [{"type": "url_citation"}], {}, ""]),
    "audio": st.sampled_from([None, {}, {"id": "a"}, ""]),
    "function_call": st.sampled_from([None, {}, {"name": "f", "arguments": "{}"}]),
    "tool_calls": st.sampled_from([None, [], [CALL], [{**CALL, "index": 0}], [CALL, CALL]]),
    "content": st.sampled_from([None, "", "done", [], [{"type": "text", "text": "a\u2028"}]]),
    "reasoning_content": st.sampled_from(["thought", None]),
}


@given(
    st.dictionaries(st.sampled_from(sorted(NULLISH_VALUES)), st.none(), max_size=7).flatmap(
        lambda keys: st.fixed_dictionaries({key: NULLISH_VALUES[key] for key in keys})
    ),
    st.booleans(),
)
@settings(max_examples=300)
def test_every_mix_of_fields_hashes_its_reference_encoding(
    fields: dict[str, Any], exclude: bool
) -> None:
    message = {"role": "assistant", **fields}
    digests = assert_reference_digests([USER, message, message], exclude)
    # Dropping every null or empty field of the table changes nothing.
    stripped = {
        key: value for key, value in message.items() if not (key in NULLISH and NULLISH[key](value))
    }
    if stripped.get("tool_calls", ()) is None:
        del stripped["tool_calls"]
    plain = history_digests(SCOPE, [USER, stripped, stripped], exclude_reasoning_content=exclude)
    assert plain.boundaries == digests.boundaries


# --- prefix digests ----------------------------------------------------------------------


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


# Random histories: any JSON in any role, assistant messages in every form.
text_part = st.builds(lambda t: {"type": "text", "text": t}, text)
content = st.none() | text | st.lists(text_part, max_size=3) | json_values
tool_call = st.fixed_dictionaries(
    {
        "id": text,
        "type": st.just("function"),
        "function": st.fixed_dictionaries({"name": text, "arguments": text}),
    },
    optional={"index": st.integers(0, 3) | json_values, "extra": json_values},
)
assistant = st.fixed_dictionaries(
    {"role": st.just("assistant")},
    optional={
        "content": content,
        "tool_calls": st.lists(tool_call, max_size=3) | json_values,
        "reasoning_content": text,
        "refusal": st.none() | text,
    },
)
other = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "tool", "system", "developer"]), "content": content},
    optional={"name": text, "tool_call_id": text},
)
messages = st.lists(assistant | other | json_values, max_size=8)


@given(assistant | other | json_values, st.booleans())
def test_normalization_is_idempotent_and_reparses(message: Any, exclude: bool) -> None:
    once = normalize_message(message, exclude_reasoning_content=exclude)
    assert normalize_message(once, exclude_reasoning_content=exclude) == once
    assert json.loads(canonical_bytes(once)) == once


@given(messages)
@settings(max_examples=60)
def test_prefix_digests_hold_for_random_histories(history: list[Any]) -> None:
    digests = history_digests(SCOPE, history)
    assert_prefix_property(SCOPE, history, digests)
    for block in digests.assistant_blocks:
        assert history_digests(SCOPE, history[: block.position + 1]).assistant_blocks[-1] == block


# Up to 150,000 code points: past what renders in one pass, and past one chunk (streamed).
huge_text = st.builds(
    lambda piece, times: piece * times,
    st.text(st.sampled_from('ab\n"\\\x01\x7f\u00e9\U0001f600'), min_size=1, max_size=50),
    st.integers(1, 3000),
)
huge = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": huge_text})


@given(st.lists(assistant | other | json_values | huge, max_size=6), st.booleans())
@settings(max_examples=100)
def test_digests_are_the_documented_framing_of_the_reference_encoding(
    history: list[Any], exclude: bool
) -> None:
    """Whichever renderer a message takes (flat, one-pass assistant, measured, streamed),
    its bytes are the reference encoding of its normalized form, framed as documented."""
    assert_reference_digests(history, exclude)


# --- refusals and limits: decided before anything is hashed --------------------------------


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


@given(messages, assistant)
@settings(max_examples=60)
def test_extending_a_state_equals_hashing_the_longer_history(
    history: list[Any], envelope: dict[str, Any]
) -> None:
    key, state = history_digests(SCOPE, history).final_state.extend(envelope)
    longer = history_digests(SCOPE, [*history, envelope])
    assert key == longer.assistant_blocks[-1]
    assert state.digest == longer.boundaries[-1]


def test_extending_respects_the_limits() -> None:
    scope = small_scope(max_messages=len(HISTORY))
    state = history_digests(scope, HISTORY).final_state
    with pytest.raises(CanonicalLimitExceeded) as refused:
        state.extend({"role": "assistant", "content": "x"})
    assert refused.value.reason == "messages"
    with pytest.raises(ValueError, match="assistant"):
        history_digests(SCOPE, HISTORY).final_state.extend({"role": "user", "content": "x"})


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


def test_a_prediction_matches_the_responses_shaped_echo() -> None:
    sent = [SentToolCall("c1", "read", "{}")]
    envelope = predict_envelope("reading", sent)
    assert envelope is not None
    scope = make_scope(body_shape="responses")
    before = visible_messages_from_responses_input([{"role": "user", "content": "hi"}], "rules")
    assert before is not None
    key, _ = history_digests(scope, before).final_state.extend(envelope)
    items = [
        {"role": "user", "content": "hi"},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "reading"}]},
        {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]  # fmt: skip
    after = visible_messages_from_responses_input(items, "rules")
    assert after is not None
    assert history_digests(scope, after).assistant_blocks[0] == key


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
