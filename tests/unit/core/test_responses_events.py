"""relay.core.responses_events: one typed value per upstream event, decoded once.

Every kind the relay reads decodes to its own class with its fields; a damaged one to
Malformed naming its first invalid field; any other kind to Other, which keeps the payload
as it came. decode never raises, whatever JSON object it is given.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.core import responses_events as ev
from relay.core.responses_events import KNOWN_EVENTS, TERMINAL_EVENTS, Malformed, Other, decode
from tests.support.json_values import json_values, text

ITEM = {"id": "fc_1", "type": "function_call", "call_id": "c", "name": "f", "arguments": ""}
RESPONSE = {"id": "resp_1", "status": "completed", "output": []}

# event type → (payload, the value it decodes to)
DECODED: list[tuple[str, dict[str, Any], object]] = [
    ("response.created", {"response": RESPONSE}, ev.ResponseCreated(RESPONSE)),
    ("response.in_progress", {"response": RESPONSE}, ev.ResponseInProgress(RESPONSE)),
    ("response.in_progress", {}, ev.ResponseInProgress(None)),
    ("response.output_item.added", {"output_index": 1, "item": ITEM},
     ev.OutputItemAdded(1, ITEM)),
    ("response.output_item.done", {"output_index": 0, "item": ITEM}, ev.OutputItemDone(0, ITEM)),
    ("response.output_text.delta",
     {"item_id": "msg_1", "output_index": 2, "content_index": 1, "delta": "Hi"},
     ev.OutputTextDelta(2, 1, "Hi", "msg_1")),
    ("response.output_text.delta", {"item_id": 7, "output_index": 0, "content_index": 0,
                                    "delta": ""}, ev.OutputTextDelta(0, 0, "", None)),
    ("response.output_text.done", {"output_index": 0, "content_index": 0, "text": "Hi"},
     ev.OutputTextDone(0, 0, "Hi", None)),
    ("response.refusal.delta", {"item_id": "m", "output_index": 0, "content_index": 3,
                                "delta": "no"}, ev.RefusalDelta(0, 3, "no", "m")),
    ("response.refusal.done", {"output_index": 0, "content_index": 0, "refusal": "no"},
     ev.RefusalDone(0, 0, "no", None)),
    ("response.reasoning_summary_text.delta",
     {"item_id": "rs_1", "output_index": 0, "summary_index": 2, "delta": "th"},
     ev.SummaryTextDelta(0, 2, "th", "rs_1")),
    ("response.reasoning_summary_text.done",
     {"output_index": 0, "summary_index": 0, "text": "think"},
     ev.SummaryTextDone(0, 0, "think", None)),
    ("response.function_call_arguments.delta", {"item_id": "fc_1", "output_index": 1,
                                                "delta": "{"},
     ev.FunctionCallArgumentsDelta(1, "{", "fc_1")),
    ("response.function_call_arguments.done", {"output_index": 1, "arguments": "{}"},
     ev.FunctionCallArgumentsDone(1, "{}", None)),
    ("response.custom_tool_call_input.delta", {"output_index": 1, "delta": "*** Begin"},
     ev.CustomToolCallInputDelta(1, "*** Begin", None)),
    ("response.custom_tool_call_input.done", {"item_id": "ct", "output_index": 1,
                                              "input": "{not json"},
     ev.CustomToolCallInputDone(1, "{not json", "ct")),
    ("response.completed", {"response": RESPONSE}, ev.ResponseCompleted(RESPONSE)),
    ("response.incomplete", {"response": {"status": "incomplete"}},
     ev.ResponseIncomplete({"status": "incomplete"})),
    ("response.failed", {"response": {"error": {"code": "x"}}},
     ev.ResponseFailed({"error": {"code": "x"}})),
    ("response.failed", {"response": "junk"}, ev.ResponseFailed("junk")),
    ("error", {"code": "rate_limit", "message": "slow down"},
     ev.ErrorEvent("rate_limit", "slow down")),
    ("error", {}, ev.ErrorEvent(None, None)),
    ("response.audio.delta", {"delta": "AAAA"}, Other("response.audio.delta", {"delta": "AAAA"})),
    ("[DONE]", {}, Other("[DONE]", {})),
]  # fmt: skip

# event type → (payload, the message of the Malformed it decodes to)
DAMAGED: list[tuple[str, dict[str, Any], str]] = [
    ("response.created", {"response": []}, "'response' (dict)"),
    ("response.completed", {}, "'response' (dict)"),
    ("response.incomplete", {"response": "x"}, "'response' (dict)"),
    ("response.output_item.added", {"output_index": 0, "item": None}, "'item' (dict)"),
    ("response.output_item.done", {"output_index": "0", "item": ITEM}, "'output_index' (int)"),
    ("response.output_item.done", {"output_index": "0"}, "'item' (dict)"),  # item read first
    ("response.output_text.delta", {"output_index": True, "content_index": 0, "delta": "a"},
     "'output_index' (int)"),  # a bool is no int
    ("response.output_text.delta", {"output_index": 0, "content_index": 0.0, "delta": "a"},
     "'content_index' (int)"),
    ("response.output_text.done", {"output_index": 0, "content_index": 0}, "'text' (str)"),
    ("response.refusal.delta", {"output_index": 0, "content_index": 0, "delta": 1},
     "'delta' (str)"),
    ("response.refusal.done", {"output_index": 0, "content_index": 0, "refusal": None},
     "'refusal' (str)"),
    ("response.reasoning_summary_text.delta", {"output_index": 0, "delta": "a"},
     "'summary_index' (int)"),
    ("response.reasoning_summary_text.done", {"output_index": 0, "summary_index": 0},
     "'text' (str)"),
    ("response.function_call_arguments.delta", {"delta": "{"}, "'output_index' (int)"),
    ("response.function_call_arguments.done", {"output_index": 0, "arguments": {}},
     "'arguments' (str)"),
    ("response.custom_tool_call_input.delta", {"output_index": 0, "delta": ["a"]},
     "'delta' (str)"),
    ("response.custom_tool_call_input.done", {"output_index": 0}, "'input' (str)"),
]  # fmt: skip


@pytest.mark.parametrize(("event_type", "data", "expected"), DECODED)
def test_each_kind_decodes_to_its_value(
    event_type: str, data: dict[str, Any], expected: object
) -> None:
    event = decode(event_type, data)
    assert event == expected
    assert type(event) is type(expected)
    assert event.type == event_type


@pytest.mark.parametrize(("event_type", "data", "field"), DAMAGED)
def test_a_damaged_kind_is_malformed_naming_its_first_invalid_field(
    event_type: str, data: dict[str, Any], field: str
) -> None:
    event = decode(event_type, data)
    assert event == Malformed(event_type, data, f"upstream event {event_type} has no valid {field}")


def test_every_kind_read_is_in_the_tables() -> None:
    assert {t for t, _, value in DECODED if not isinstance(value, Other)} == KNOWN_EVENTS
    damaged = {t for t, _, _ in DAMAGED}
    # Read whatever they hold: never malformed.
    unchecked = {"response.in_progress", "response.failed", "error"}
    assert damaged == KNOWN_EVENTS - unchecked


def test_the_terminal_events_are_the_three_that_end_a_stream() -> None:
    assert {
        ev.ResponseCompleted.type,
        ev.ResponseIncomplete.type,
        ev.ResponseFailed.type,
    } == TERMINAL_EVENTS
    assert TERMINAL_EVENTS <= KNOWN_EVENTS


def test_a_decoded_value_is_frozen() -> None:
    event = decode("response.output_text.delta",
                   {"output_index": 0, "content_index": 0, "delta": "a"})  # fmt: skip
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.delta = "b"  # type: ignore[union-attr, misc]


event_types = st.sampled_from(sorted(KNOWN_EVENTS)) | text
# Objects that share field names with the real events, so the decoders' paths are all taken.
fields = st.sampled_from(
    ["output_index", "content_index", "summary_index", "delta", "text", "refusal",
     "arguments", "input", "item", "item_id", "response", "code", "message"]
) | text  # fmt: skip
json_objects = st.dictionaries(fields, json_values, max_size=6)


@given(event_types, json_objects)
def test_decode_never_raises_and_gives_a_value_of_the_union(
    event_type: str, data: dict[str, Any]
) -> None:
    event = decode(event_type, data)
    assert event.type == event_type
    if event_type not in KNOWN_EVENTS:
        assert event == Other(event_type, data)
    elif isinstance(event, Malformed):
        assert event.data is data
        assert event.problem.startswith(f"upstream event {event_type} has no valid '")


@given(text.filter(lambda t: t not in KNOWN_EVENTS), json_objects)
def test_other_round_trips_the_payload_it_came_with(event_type: str, data: dict[str, Any]) -> None:
    event = decode(event_type, data)
    assert isinstance(event, Other)
    assert event.data is data  # not copied: what the passthrough forwards is what came
    assert decode(event.type, event.data) == event
