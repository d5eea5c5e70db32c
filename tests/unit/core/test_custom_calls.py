"""Custom tool calls in the replay core: capture, projection, prediction, the Responses-shaped
identity and the planner's call pairing.

Whatever form the relay sent a custom call in (function-type with the raw input as
arguments, or the Chat API's custom form) and whichever way a client hands it back
(``function_call`` naming the custom tool, ``custom_tool_call``, or the Chat custom tool
call), the prediction and the history meet in one envelope, and two histories that meet
in one identity send the same model input.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.core.capture import ClientProjection, finish_capture
from relay.core.envelope import normalize_assistant
from relay.core.history_digest import history_digests
from relay.core.planner import plan_replay
from relay.core.predict import SentToolCall, predict_envelopes
from relay.core.receipts import Reason
from relay.core.responses_history import custom_tool_names, visible_messages_from_responses_input
from relay.errors import InvalidRequest
from relay.settings.custom_calls import CustomCallForm
from relay.translate.responses_input import resolve_tool_calls
from tests.unit.core.test_capture import REQUEST, decide, fake_events, relay
from tests.unit.core.test_planner import NOW, SCOPE, Builder, positions, reasons

PATCH = '*** Begin Patch\n+caf\u00e9 "q" \\ \t{"a": 1}\n*** End Patch\n'
TOOLS: list[Any] = [
    *REQUEST["tools"],  # type: ignore[misc]  # a list: REQUEST is a dict of mixed values
    {"type": "custom", "name": "ApplyPatch", "format": {"type": "text"}},
]
SCRIPT = {
    "output": [
        {"type": "reasoning", "summary": ["patch"]},
        {"type": "message", "text": "Patching."},
        {"type": "custom_tool_call", "name": "ApplyPatch", "input": PATCH, "call_id": "call_p"},
        {"type": "function_call", "name": "grep", "arguments": '{"q": 1}', "call_id": "call_g"},
    ]
}
CUSTOM_CALL = {"id": "call_p", "type": "custom", "custom": {"name": "ApplyPatch", "input": PATCH}}


def grep_call(arguments: str) -> dict[str, Any]:
    return {
        "id": "call_g",
        "type": "function",
        "function": {"name": "grep", "arguments": arguments},
    }


# --- capture and prediction -------------------------------------------------------------


@pytest.mark.parametrize("form", ["function", "custom"])
def test_a_block_with_custom_calls_is_admitted_with_the_custom_envelope(
    form: CustomCallForm,
) -> None:
    events = fake_events(SCRIPT, tools=TOOLS)
    streamed, answered = decide(events, form=form)
    assert streamed == answered
    assert streamed.kind == "admit", streamed.reason
    assert streamed.output is not None
    assert [item["type"] for item in streamed.output][2] == "custom_tool_call"
    # One envelope per argument spelling of the function call; the custom input as sent.
    assert streamed.envelopes == (
        normalize_assistant({"role": "assistant", "content": "Patching.",
                             "tool_calls": [CUSTOM_CALL, grep_call('{"q":1}')]}),
        normalize_assistant({"role": "assistant", "content": "Patching.",
                             "tool_calls": [CUSTOM_CALL, grep_call('{"q": 1}')]}),
    )  # fmt: skip


def test_the_client_projection_keeps_the_form_it_was_sent() -> None:
    events = fake_events(SCRIPT, tools=TOOLS)
    function_form = relay(events, form="function").streamed.tool_calls
    custom_form = relay(events, form="custom").streamed.tool_calls
    assert function_form[0] == SentToolCall("call_p", "ApplyPatch", PATCH, "function")
    assert custom_form[0] == SentToolCall("call_p", "ApplyPatch", PATCH, "custom")
    assert function_form[1] == custom_form[1] == SentToolCall("call_g", "grep", '{"q": 1}')


def test_a_function_call_sent_in_the_custom_form_poisons() -> None:
    """The form changes how a custom call is spelled, never a function call's kind."""
    events = fake_events(SCRIPT, tools=TOOLS)
    relayed = relay(events, form="custom")
    assert finish_capture(relayed.capture, relayed.answered).kind == "admit"
    grep_as_custom = {"id": "call_g", "type": "custom", "custom": {"name": "grep",
                                                                   "input": '{"q": 1}'}}  # fmt: skip
    message = {"role": "assistant", "content": "Patching.",
               "tool_calls": [CUSTOM_CALL, grep_as_custom]}  # fmt: skip
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
    forged = ClientProjection.from_completion({"choices": [choice]})
    assert forged.known
    result = finish_capture(relayed.capture, forged)
    assert (result.kind, result.reason) == ("poison", Reason.PROJECTION_MISMATCH)


@pytest.mark.parametrize(
    "chunks",
    [
        [{"index": 0, "id": "c", "type": "custom", "custom": {"name": "P", "input": ""}},
         {"index": 0, "function": {"arguments": "x"}}],  # function pieces for a custom call
        [{"index": 0, "id": "c", "type": "function", "function": {"name": "P"}},
         {"index": 0, "type": "custom", "custom": {"input": "x"}}],  # two kinds
        [{"index": 0, "id": "c", "type": "custom", "function": {"name": "P"},
          "custom": {"name": "P"}}],  # both
    ],
)  # fmt: skip
def test_a_call_a_client_could_read_two_ways_is_not_known(chunks: list[Any]) -> None:
    projection = ClientProjection()
    for call in chunks:
        delta = {"tool_calls": [call]}
        projection.feed_chunk({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    assert not projection.known


def test_custom_input_is_never_respelled() -> None:
    call = SentToolCall("c", "P", '{"a": 1}', "custom")  # JSON-looking freeform text
    (envelope,) = predict_envelopes("", [call]) or ()
    assert envelope["tool_calls"] == [
        {"id": "c", "type": "custom", "custom": {"name": "P", "input": '{"a": 1}'}}
    ]
    assert predict_envelopes("", [SentToolCall("c", "P", "not json {", "custom")]) is not None


# --- the Responses-shaped history ---------------------------------------------------------

USER = {"role": "user", "content": "edit"}
AS_FUNCTION = {"type": "function_call", "call_id": "call_p", "name": "ApplyPatch",
               "arguments": PATCH}  # fmt: skip
AS_CUSTOM = {"type": "custom_tool_call", "call_id": "call_p", "name": "ApplyPatch",
             "input": PATCH}  # fmt: skip


@pytest.mark.parametrize("call", [AS_FUNCTION, AS_CUSTOM], ids=["function_call", "custom"])
@pytest.mark.parametrize("answer", ["function_call_output", "custom_tool_call_output"])
def test_both_echoes_of_a_custom_call_map_to_the_predicted_envelope(call: Any, answer: str) -> None:
    items = [USER, call, {"type": answer, "call_id": "call_p", "output": "Done"}]
    assert visible_messages_from_responses_input(items, None, TOOLS) == [
        USER,
        {"role": "assistant", "content": "", "tool_calls": [CUSTOM_CALL]},
        {"role": "tool", "tool_call_id": "call_p", "content": "Done"},
    ]


def test_a_function_call_is_custom_only_when_its_tool_is_declared_custom() -> None:
    messages = visible_messages_from_responses_input([USER, AS_FUNCTION], None, REQUEST["tools"])
    assert messages is not None
    assert messages[1]["tool_calls"][0]["type"] == "function"


def test_a_custom_calls_id_keeps_it_apart_its_status_carries_nothing() -> None:
    """As for every item (relay.core.responses_history): ``status`` is not model input; a
    ``custom_tool_call``'s ``id`` goes upstream with it, so it stays in the identity; the
    function spelling goes upstream without its ``id``, so there it is left out."""

    def mapped(call: dict[str, Any]) -> Any:
        return visible_messages_from_responses_input([USER, call], None, TOOLS)

    plain = mapped(AS_CUSTOM)
    assert mapped({**AS_CUSTOM, "status": "completed"}) == plain
    assert mapped({**AS_FUNCTION, "id": "fc_1", "status": "completed"}) == plain
    with_id = mapped({**AS_CUSTOM, "id": "ctc_1"})
    assert with_id is not None and with_id != plain
    assert mapped({**AS_CUSTOM, "parsed": {}}) is None  # an unknown field


# Small alphabets, so that different histories often meet in one identity.
CALL_KINDS = ("function_call", "custom_tool_call")
OUTPUT_KINDS = ("function_call_output", "custom_tool_call_output")


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[Any], list[list[Any]]]:
    """A Responses-shaped history, a respelling of it (each call and output in a random
    one of its two spellings), and the tools both are sent with."""
    customs = draw(st.sets(st.sampled_from(["P", "R"])))
    tools = [{"type": "custom" if name in customs else "function", "name": name}
             for name in ("P", "R")]  # fmt: skip
    items: list[Any] = [USER]
    respelled: list[Any] = [USER]
    for _ in range(draw(st.integers(1, 6))):
        shape = draw(st.sampled_from(["call", "output", "user"]))
        call_id = draw(st.sampled_from(["a", "b"]))
        if shape == "user":
            item: dict[str, Any] = {"role": "user", "content": draw(st.sampled_from("xy"))}
            items.append(item)
            respelled.append(item)
            continue
        if shape == "call":
            name, text = draw(st.sampled_from("PR")), draw(st.sampled_from(["{}", "z"]))
            kinds = [draw(st.sampled_from(CALL_KINDS)) for _ in range(2)]
            a, b = (
                {"type": k, "call_id": call_id, "name": name,
                 ("input" if k == "custom_tool_call" else "arguments"): text}
                for k in kinds
            )  # fmt: skip
        else:
            text = draw(st.sampled_from(["o", "p"]))
            a, b = ({"type": draw(st.sampled_from(OUTPUT_KINDS)), "call_id": call_id,
                     "output": text} for _ in range(2))  # fmt: skip
        items.append(a)
        respelled.append(b)
    return tools, [items, respelled]


def upstream_input(items: list[Any], tools: list[Any]) -> list[Any] | None:
    try:
        return resolve_tool_calls(items, custom_tool_names(tools))
    except InvalidRequest:
        return None  # refused: nothing goes upstream, nothing is cached


@given(histories(), histories())
def test_histories_with_one_identity_send_one_model_input(first: Any, second: Any) -> None:
    """The safety rule of responses_history, over call spellings and tool declarations:
    equal envelopes (within one scope: the same tools) mean equal upstream input."""
    for tools, pair in (first, (first[0], [first[1][0], second[1][1]])):
        identities = [visible_messages_from_responses_input(h, None, tools) for h in pair]
        sent = [upstream_input(h, tools) for h in pair]
        if None in identities or None in sent:
            continue
        if identities[0] == identities[1]:
            assert sent[0] == sent[1]


# --- the planner's call pairing -----------------------------------------------------------

# u0, a1 (a custom call), t2 (its result), a3 (text), u4
MESSAGES: list[dict[str, Any]] = [
    USER,
    {"role": "assistant", "content": None, "tool_calls": [CUSTOM_CALL]},
    {"role": "tool", "tool_call_id": "call_p", "content": "Done"},
    {"role": "assistant", "content": "ok"},
    {"role": "user", "content": "next"},
]
REASONING = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "enc-1"}
BLOCK_ITEM = {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_p",
              "name": "ApplyPatch", "input": PATCH}  # fmt: skip


@pytest.mark.parametrize(
    ("item", "replayed"),
    [
        pytest.param(BLOCK_ITEM, [1], id="custom-call"),
        pytest.param({**BLOCK_ITEM, "type": "function_call", "arguments": PATCH}, [],
                     id="made-as-a-function-call"),
        pytest.param({**BLOCK_ITEM, "name": "Other"}, [], id="another-tool"),
    ],
)  # fmt: skip
def test_the_planner_pairs_custom_calls_by_kind_id_and_name(item: Any, replayed: list[int]) -> None:
    b = Builder()
    history = history_digests(SCOPE, MESSAGES)
    b.history, b.keys = history, {k.position: k for k in history.assistant_blocks}
    b.record(1, items=[REASONING, item])
    plan = plan_replay(history, MESSAGES, b.source, generation=1, now=NOW)
    assert positions(plan) == replayed
    if not replayed:
        assert reasons(plan) == [Reason.CALL_PAIRING_BROKEN]
