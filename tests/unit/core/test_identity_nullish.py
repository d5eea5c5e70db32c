"""Null and empty assistant fields that carry nothing hash as absent (issue 16).

An assistant message echoed exactly as the JSON answer returned it -- the official Python
SDK's ``message.model_dump()``, a script resending the ``message`` object it received, a
curl user -- has ``refusal: null`` and, from the SDK, ``annotations``, ``audio``,
``function_call`` and ``tool_calls`` as ``null`` too. Each must hash as the plain
``{"role", "content"}`` (and as the prediction capture records), on the one-pass paths as
on the general one; a non-empty value stays in the identity.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.core import identity
from relay.core.canonical import Budget, NotCanonicalizable
from relay.core.envelope import NULLISH, normalize_assistant, normalize_message
from relay.core.identity import history_digests
from relay.core.predict import SentToolCall, predict_envelopes
from relay.model_alias import ModelAlias
from relay.translate.request import translate_request
from tests.support.canonical_reference import identity_scope, reference_digests

SCOPE = identity_scope()
GPT5 = ModelAlias("gpt-5", "gpt-5")
USER = {"role": "user", "content": "read a.py"}
CALL = {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
SDK_NULLS = {"refusal": None, "annotations": None, "audio": None, "function_call": None}


def sdk_dump(content: str | None, calls: list[dict[str, Any]] | None) -> dict[str, Any]:
    """``ChatCompletionMessage.model_dump()``: every field, unset ones null."""
    return {"content": content, "role": "assistant", **SDK_NULLS, "tool_calls": calls}


def end_digest(message: dict[str, Any]) -> str:
    return history_digests(SCOPE, [USER, message]).boundaries[-1]


def predicted_end(text: str, calls: tuple[SentToolCall, ...] = ()) -> str:
    """Where capture records the answer: the request's history extended with the
    prediction (the respelled envelope)."""
    envelopes = predict_envelopes(text, calls)
    assert envelopes is not None
    state = history_digests(SCOPE, [USER]).final_state
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


# --- the one-pass renderers -----------------------------------------------------------------


def test_the_sdk_shapes_take_the_one_pass_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """model_dump() echoes are rendered by the straight-line envelope renderer: never
    measured, and the bytes are the reference encoding of the normalized message."""

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("left the one-pass path")

    history = [USER, sdk_dump("done", None), sdk_dump(None, [CALL]), sdk_dump("", [CALL, CALL])]
    history += [{"role": "assistant", "content": "x", "refusal": None, "annotations": []}]
    monkeypatch.setattr(Budget, "measure", fail)
    digests = history_digests(SCOPE, history)
    monkeypatch.undo()
    boundaries, sizes, fingerprints = reference_digests(SCOPE, history)
    assert list(digests.boundaries) == boundaries
    assert list(digests.message_sizes) == sizes
    assert [b.envelope_fingerprint for b in digests.assistant_blocks] == fingerprints


def test_a_kept_field_leaves_the_one_pass_paths_for_measuring(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    general = identity._render_assistant_general

    def spy(*args: Any) -> Any:
        calls.append("general")
        return general(*args)

    monkeypatch.setattr(identity, "_render_assistant_general", spy)
    message = {**sdk_dump("done", None), "refusal": "no"}
    digests = history_digests(SCOPE, [USER, message])
    assert calls == []  # not even the general one-pass renderer: measured
    assert list(digests.boundaries) == reference_digests(SCOPE, [USER, message])[0]


class Key(str):
    pass


def test_an_inexact_nullish_key_is_refused_as_measure_refuses_it() -> None:
    message = {"role": "assistant", "content": "x", Key("refusal"): None}
    with pytest.raises(NotCanonicalizable) as measured:
        Budget().measure(normalize_message(message))
    with pytest.raises(NotCanonicalizable) as refused:
        history_digests(SCOPE, [USER, message])
    assert refused.value.reason == measured.value.reason == "key"


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
    history = [USER, message, message]
    digests = history_digests(SCOPE, history, exclude_reasoning_content=exclude)
    boundaries, sizes, fingerprints = reference_digests(SCOPE, history, exclude)
    assert list(digests.boundaries) == boundaries
    assert list(digests.message_sizes) == sizes
    assert [b.envelope_fingerprint for b in digests.assistant_blocks] == fingerprints
    # Dropping every null or empty field of the table changes nothing.
    stripped = {
        key: value for key, value in message.items() if not (key in NULLISH and NULLISH[key](value))
    }
    if stripped.get("tool_calls", ()) is None:
        del stripped["tool_calls"]
    plain = history_digests(SCOPE, [USER, stripped, stripped], exclude_reasoning_content=exclude)
    assert plain.boundaries == digests.boundaries
