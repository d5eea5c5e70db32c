"""The Responses stream events the relay reads: one typed union, decoded once (pure).

The transport hands each upstream event over as ``(type, JSON object)``
(:func:`relay.transport.sse.decode_event`). Where a pipeline receives it, :func:`decode`
turns it into one of the frozen values below, and every reader takes that value: the
stream converter (``relay.translate.stream_converter``), the capture
(``relay.core.capture``) and the passthrough (``relay.pipeline.passthrough``, which still
forwards the original payload, so the bytes on the wire never change).

:func:`decode` never raises. A kind the relay does not read is :class:`Other` (its
payload kept as it came); a kind it reads whose fields are not what it relies on is
:class:`Malformed`, which carries the message a reader that needs the fields raises:
``upstream event <type> has no valid '<field>' (<kind>)``, naming the first invalid
field in the order the converter reads them. An int field takes no bool; ``item_id`` is
kept only when it is a string. ``response.failed`` and ``error`` are read whatever they
hold (each field is checked where it is used), so they are never malformed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final

# The events that end a Responses stream.
TERMINAL_EVENTS: Final = frozenset({"response.completed", "response.incomplete", "response.failed"})


@dataclass(frozen=True, slots=True)
class ResponseCreated:
    type: ClassVar[str] = "response.created"
    response: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ResponseInProgress:
    """Read by nobody; typed so that it is not mistaken for an unknown kind."""

    type: ClassVar[str] = "response.in_progress"
    response: object


@dataclass(frozen=True, slots=True)
class OutputItemAdded:
    type: ClassVar[str] = "response.output_item.added"
    output_index: int
    item: dict[str, Any]


@dataclass(frozen=True, slots=True)
class OutputItemDone:
    type: ClassVar[str] = "response.output_item.done"
    output_index: int
    item: dict[str, Any]


@dataclass(frozen=True, slots=True)
class OutputTextDelta:
    type: ClassVar[str] = "response.output_text.delta"
    output_index: int
    content_index: int
    delta: str
    item_id: str | None


@dataclass(frozen=True, slots=True)
class OutputTextDone:
    type: ClassVar[str] = "response.output_text.done"
    output_index: int
    content_index: int
    text: str
    item_id: str | None


@dataclass(frozen=True, slots=True)
class RefusalDelta:
    type: ClassVar[str] = "response.refusal.delta"
    output_index: int
    content_index: int
    delta: str
    item_id: str | None


@dataclass(frozen=True, slots=True)
class RefusalDone:
    type: ClassVar[str] = "response.refusal.done"
    output_index: int
    content_index: int
    refusal: str
    item_id: str | None


@dataclass(frozen=True, slots=True)
class SummaryTextDelta:
    type: ClassVar[str] = "response.reasoning_summary_text.delta"
    output_index: int
    summary_index: int
    delta: str
    item_id: str | None


@dataclass(frozen=True, slots=True)
class SummaryTextDone:
    type: ClassVar[str] = "response.reasoning_summary_text.done"
    output_index: int
    summary_index: int
    text: str
    item_id: str | None


@dataclass(frozen=True, slots=True)
class FunctionCallArgumentsDelta:
    type: ClassVar[str] = "response.function_call_arguments.delta"
    output_index: int
    delta: str
    item_id: str | None


@dataclass(frozen=True, slots=True)
class FunctionCallArgumentsDone:
    type: ClassVar[str] = "response.function_call_arguments.done"
    output_index: int
    arguments: str
    item_id: str | None


@dataclass(frozen=True, slots=True)
class CustomToolCallInputDelta:
    """A custom tool call's input piece: the raw text, never read as JSON."""

    type: ClassVar[str] = "response.custom_tool_call_input.delta"
    output_index: int
    delta: str
    item_id: str | None


@dataclass(frozen=True, slots=True)
class CustomToolCallInputDone:
    type: ClassVar[str] = "response.custom_tool_call_input.done"
    output_index: int
    input: str
    item_id: str | None


@dataclass(frozen=True, slots=True)
class ResponseCompleted:
    type: ClassVar[str] = "response.completed"
    response: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ResponseIncomplete:
    type: ClassVar[str] = "response.incomplete"
    response: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ResponseFailed:
    """Reported whatever it holds (``response.error`` is read when it is usable)."""

    type: ClassVar[str] = "response.failed"
    response: object


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    """The upstream's ``error`` event: reported whatever it holds."""

    type: ClassVar[str] = "error"
    code: object
    message: object


@dataclass(frozen=True, slots=True)
class Other:
    """A kind the relay does not read (forward compatible): passed on as it came."""

    type: str
    data: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Malformed:
    """A kind the relay reads, missing a field it relies on; ``problem`` names the first."""

    type: str
    data: Mapping[str, Any]
    problem: str


ResponsesEvent = (
    ResponseCreated
    | ResponseInProgress
    | OutputItemAdded
    | OutputItemDone
    | OutputTextDelta
    | OutputTextDone
    | RefusalDelta
    | RefusalDone
    | SummaryTextDelta
    | SummaryTextDone
    | FunctionCallArgumentsDelta
    | FunctionCallArgumentsDone
    | CustomToolCallInputDelta
    | CustomToolCallInputDone
    | ResponseCompleted
    | ResponseIncomplete
    | ResponseFailed
    | ErrorEvent
    | Other
    | Malformed
)

# A terminal event, decoded: what the capture and the passthrough take the final response from.
Terminal = ResponseCompleted | ResponseIncomplete | ResponseFailed


def _problem(event_type: str, data: Mapping[str, Any], fields: _Fields) -> str:
    """The message for the first field that is not of its exact kind."""
    for key, kind in fields:
        if type(data.get(key)) is not kind:
            return f"upstream event {event_type} has no valid '{key}' ({kind.__name__})"
    raise AssertionError("called for a payload that has every field")  # pragma: no cover


def _item_id(data: Mapping[str, Any]) -> str | None:
    item_id = data.get("item_id")
    return item_id if type(item_id) is str else None


# A decoder tests the exact types and builds the message only when a field is wrong (one
# event in thousands). The most frequent event by far, the text delta, has its own.

_Decoder = Callable[[str, Mapping[str, Any]], "ResponsesEvent"]
_Fields = tuple[tuple[str, type], ...]
_RESPONSE: Final = (("response", dict),)
_ITEM: Final = (("item", dict), ("output_index", int))
_CONTENT_DELTA: Final = (("output_index", int), ("content_index", int), ("delta", str))
_TEXT_DONE: Final = (("output_index", int), ("content_index", int), ("text", str))
_REFUSAL_DONE: Final = (("output_index", int), ("content_index", int), ("refusal", str))
_SUMMARY_DELTA: Final = (("output_index", int), ("summary_index", int), ("delta", str))
_SUMMARY_DONE: Final = (("output_index", int), ("summary_index", int), ("text", str))
_PIECE: Final = (("output_index", int), ("delta", str))
_ARGUMENTS_DONE: Final = (("output_index", int), ("arguments", str))
_INPUT_DONE: Final = (("output_index", int), ("input", str))


def _text_delta(t: str, d: Mapping[str, Any]) -> ResponsesEvent:
    o, c, delta = d.get("output_index"), d.get("content_index"), d.get("delta")
    if type(o) is int and type(c) is int and type(delta) is str:
        return OutputTextDelta(o, c, delta, _item_id(d))
    return Malformed(t, d, _problem(t, d, _CONTENT_DELTA))


def _checked(
    cls: Callable[..., ResponsesEvent], fields: _Fields, *, item_id: bool = True
) -> _Decoder:
    """A decoder of an event whose fields are ``fields`` (passed to ``cls`` in that order,
    then the ``item_id`` when the event has one)."""
    keys = tuple(key for key, _ in fields)
    kinds = tuple(kind for _, kind in fields)

    def decode_one(t: str, d: Mapping[str, Any]) -> ResponsesEvent:
        values = [d.get(key) for key in keys]
        if all(map(_is_exactly, values, kinds)):
            return cls(*values, _item_id(d)) if item_id else cls(*values)
        return Malformed(t, d, _problem(t, d, fields))

    return decode_one


def _is_exactly(value: object, kind: type) -> bool:
    return type(value) is kind


def _item(
    cls: type[OutputItemAdded | OutputItemDone], t: str, d: Mapping[str, Any]
) -> ResponsesEvent:
    o, item = d.get("output_index"), d.get("item")
    if type(item) is dict and type(o) is int:
        return cls(o, item)
    return Malformed(t, d, _problem(t, d, _ITEM))


_DECODERS: Final[dict[str, _Decoder]] = {
    "response.output_text.delta": _text_delta,
    "response.output_text.done": _checked(OutputTextDone, _TEXT_DONE),
    "response.refusal.delta": _checked(RefusalDelta, _CONTENT_DELTA),
    "response.refusal.done": _checked(RefusalDone, _REFUSAL_DONE),
    "response.reasoning_summary_text.delta": _checked(SummaryTextDelta, _SUMMARY_DELTA),
    "response.reasoning_summary_text.done": _checked(SummaryTextDone, _SUMMARY_DONE),
    "response.function_call_arguments.delta": _checked(FunctionCallArgumentsDelta, _PIECE),
    "response.function_call_arguments.done": _checked(FunctionCallArgumentsDone, _ARGUMENTS_DONE),
    "response.custom_tool_call_input.delta": _checked(CustomToolCallInputDelta, _PIECE),
    "response.custom_tool_call_input.done": _checked(CustomToolCallInputDone, _INPUT_DONE),
    # The item is read first (the converter's order), but passed second.
    "response.output_item.added": lambda t, d: _item(OutputItemAdded, t, d),
    "response.output_item.done": lambda t, d: _item(OutputItemDone, t, d),
    "response.created": _checked(ResponseCreated, _RESPONSE, item_id=False),
    "response.in_progress": lambda t, d: ResponseInProgress(d.get("response")),
    "response.completed": _checked(ResponseCompleted, _RESPONSE, item_id=False),
    "response.incomplete": _checked(ResponseIncomplete, _RESPONSE, item_id=False),
    "response.failed": lambda t, d: ResponseFailed(d.get("response")),
    "error": lambda t, d: ErrorEvent(d.get("code"), d.get("message")),
}

# The kinds the relay reads (every other type decodes to Other).
KNOWN_EVENTS: Final = frozenset(_DECODERS)


def decode(event_type: str, data: Mapping[str, Any]) -> ResponsesEvent:
    """The typed value of one upstream event (see the module docstring); never raises."""
    decoder = _DECODERS.get(event_type)
    return Other(event_type, data) if decoder is None else decoder(event_type, data)
