"""The Responses events the converter reads, decoded (relay.core.responses_events).

Each consumed event is checked when it is decoded; a malformed one raises, once it
reaches the converter, the same UpstreamProtocolError it always did, naming the first
invalid field in the order the converter reads them (pinned here for every event type,
field and kind of damage).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from relay.core.responses_events import decode
from relay.errors import UpstreamProtocolError
from relay.translate.stream_converter import ChatStreamConverter, Chunk

FCALL = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f", "arguments": ""}
MESSAGE = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
RESPONSE = {"id": "resp_1", "status": "completed", "output": []}

# event type → (a valid payload, the checked fields in the order they are checked)
CHECKED: dict[str, tuple[dict[str, Any], tuple[tuple[str, type], ...]]] = {
    "response.created": ({"response": RESPONSE}, (("response", dict),)),
    "response.output_item.added": (
        {"output_index": 0, "item": MESSAGE}, (("item", dict), ("output_index", int))),
    "response.output_item.done": (
        {"output_index": 0, "item": MESSAGE}, (("item", dict), ("output_index", int))),
    "response.output_text.delta": (
        {"item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "a"},
        (("output_index", int), ("content_index", int), ("delta", str))),
    "response.output_text.done": (
        {"item_id": "msg_1", "output_index": 0, "content_index": 0, "text": "a"},
        (("output_index", int), ("content_index", int), ("text", str))),
    "response.refusal.delta": (
        {"item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "a"},
        (("output_index", int), ("content_index", int), ("delta", str))),
    "response.refusal.done": (
        {"item_id": "msg_1", "output_index": 0, "content_index": 0, "refusal": "a"},
        (("output_index", int), ("content_index", int), ("refusal", str))),
    "response.reasoning_summary_text.delta": (
        {"item_id": "rs_1", "output_index": 0, "summary_index": 0, "delta": "a"},
        (("output_index", int), ("summary_index", int), ("delta", str))),
    "response.reasoning_summary_text.done": (
        {"item_id": "rs_1", "output_index": 0, "summary_index": 0, "text": "a"},
        (("output_index", int), ("summary_index", int), ("text", str))),
    "response.function_call_arguments.delta": (
        {"item_id": "fc_1", "output_index": 0, "delta": "{"},
        (("output_index", int), ("delta", str))),
    "response.function_call_arguments.done": (
        {"item_id": "fc_1", "output_index": 0, "arguments": "{}"},
        (("output_index", int), ("arguments", str))),
    "response.completed": ({"response": RESPONSE}, (("response", dict),)),
    "response.incomplete": (
        {"response": {**RESPONSE, "status": "incomplete",
                      "incomplete_details": {"reason": "max_output_tokens"}}},
        (("response", dict),)),
}  # fmt: skip

# Values that are not the field's kind (a bool is no int; a missing field reads as None).
MISSING = object()
WRONG: dict[type, tuple[Any, ...]] = {
    int: (MISSING, None, True, False, "0", 0.0, [0]),
    str: (MISSING, None, 0, True, b"a", ["a"]),
    dict: (MISSING, None, "x", [], 0, True),
}


def fed(event_type: str, data: dict[str, Any]) -> list[Chunk]:
    conv = ChatStreamConverter(completion_id="c", created=1, model="m",
                               include_usage=True, reasoning_summaries=True)  # fmt: skip
    conv.feed(decode("response.output_item.added", {"output_index": 0, "item": FCALL}))
    return list(conv.feed(decode(event_type, data)))


def damaged(valid: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    data = dict(valid)
    for key, value in changes.items():
        if value is MISSING:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def test_the_valid_payloads_are_accepted() -> None:
    for event_type, (valid, _) in CHECKED.items():
        fed(event_type, valid)  # raises on a mistake in this table


@pytest.mark.parametrize("event_type", sorted(CHECKED))
def test_a_damaged_field_is_named_first_in_reading_order(event_type: str) -> None:
    valid, fields = CHECKED[event_type]
    cases = 0
    for broken in range(1, len(fields) + 1):
        for chosen in itertools.combinations(fields, broken):
            for values in itertools.product(*(WRONG[kind][:3] for _, kind in chosen)):
                data = damaged(valid, {key: v for (key, _), v in zip(chosen, values, strict=True)})
                first, kind = next(f for f in fields if f in chosen)
                message = f"upstream event {event_type} has no valid '{first}' ({kind.__name__})"
                with pytest.raises(UpstreamProtocolError) as info:
                    fed(event_type, data)
                assert str(info.value) == message, (data, str(info.value))
                cases += 1
    assert cases >= 3 * len(fields)


@pytest.mark.parametrize(
    ("event_type", "key", "kind"),
    [(t, key, kind) for t, (_, fields) in sorted(CHECKED.items()) for key, kind in fields],
)
def test_every_wrong_kind_of_value_is_refused(event_type: str, key: str, kind: type) -> None:
    valid, _ = CHECKED[event_type]
    for value in WRONG[kind]:
        with pytest.raises(UpstreamProtocolError, match=f"no valid '{key}' \\({kind.__name__}\\)"):
            fed(event_type, damaged(valid, {key: value}))


def test_arguments_for_an_output_that_is_no_call_are_refused_before_their_payload() -> None:
    for event_type in ("response.function_call_arguments.delta",
                       "response.function_call_arguments.done"):  # fmt: skip
        with pytest.raises(UpstreamProtocolError, match="output 3, which is not an announced"):
            fed(event_type, {"output_index": 3})  # no payload: the position is refused first


@pytest.mark.parametrize(
    "event_type", ["response.failed", "error", "response.in_progress", "response.audio.delta"]
)
def test_unchecked_events_take_any_payload(event_type: str) -> None:
    """response.failed and error are reported whatever they hold; unknown events are
    ignored whatever they hold."""
    for data in ({}, {"response": "x"}, {"response": {"error": 5}}, {"code": [], "message": 7}):
        if event_type in ("response.failed", "error"):
            with pytest.raises(Exception) as info:
                fed(event_type, data)
            assert type(info.value).__name__ == "UpstreamFailed"
        else:
            assert fed(event_type, data) == []
