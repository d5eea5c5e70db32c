"""The SSE boundary's types: the Responses events the relay reads, the Chat shapes it makes.

Upstream events arrive as ``(type, JSON object)`` pairs (:func:`relay.transport.sse.decode_event`)
and are passed on untouched to whoever consumes them: the passthrough forwards them as
they came, the capture stores what they hold. The stream converter reads a typed view:
each ``read_*`` function below checks the fields the converter relies on, in the order it
reads them, and returns the same dict typed as that event (a ``TypedDict`` costs nothing
at run time: no copy, no object per event). A field it leaves unchecked is typed
``object``, so mypy makes the reader of such a field check it too.

A malformed event raises :class:`UpstreamProtocolError` naming the first invalid field:
``upstream event <type> has no valid '<field>' (<kind>)``. An int field takes no bool.

The produced side, :class:`ChatCompletionChunk` and :class:`ChatCompletion`, are the
shapes the converter and :func:`~relay.translate.responses_to_chat.response_to_chat_completion`
build; key order is the wire order (``chat_sse`` relies on it for its frame templates).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict

from relay.errors import UpstreamProtocolError

# A decoded Responses event's payload, as the transport gives it (any JSON object).
RawEvent = Mapping[str, Any]

# --- consumed: Responses stream events ------------------------------------------------


class ResponseEvent(TypedDict):
    """``response.created``, ``response.completed``, ``response.incomplete``: the
    response object (its fields are read by the ``responses_to_chat`` readers)."""

    response: dict[str, Any]


class OutputItemEvent(TypedDict):
    """``response.output_item.added`` / ``.done``."""

    item: dict[str, Any]
    output_index: int


class _ItemPart(TypedDict):
    item_id: NotRequired[object]  # remembered when it is a string
    output_index: int


class OutputTextDelta(_ItemPart):
    content_index: int
    delta: str


class OutputTextDone(_ItemPart):
    content_index: int
    text: str


class RefusalDelta(_ItemPart):
    content_index: int
    delta: str


class RefusalDone(_ItemPart):
    content_index: int
    refusal: str


class ReasoningSummaryTextDelta(_ItemPart):
    summary_index: int
    delta: str


class ReasoningSummaryTextDone(_ItemPart):
    summary_index: int
    text: str


class FunctionCallArgumentsDelta(_ItemPart):
    delta: str


class FunctionCallArgumentsDone(_ItemPart):
    arguments: str


class CustomToolCallInputDone(_ItemPart):
    input: str


class ResponseFailed(TypedDict, total=False):
    """``response.failed``: reported whatever it holds."""

    response: object


class ErrorEvent(TypedDict, total=False):
    """``error``: reported whatever it holds (``code`` and ``message`` when usable)."""

    code: object
    message: object


class FunctionCall(TypedDict):
    """The fields of a ``function_call`` output item the Chat side carries (for a
    ``custom_tool_call`` item: its raw ``input`` as ``arguments``)."""

    call_id: str
    name: str
    arguments: str


# --- the readers -------------------------------------------------------------------------

_Fields = tuple[tuple[str, type], ...]


def require(data: RawEvent, key: str, kind: type, event_type: str) -> Any:
    """``data[key]`` when it is a ``kind`` (an int is no bool); else the protocol error."""
    value = data.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise UpstreamProtocolError(
            f"upstream event {event_type} has no valid '{key}' ({kind.__name__})"
        )
    return value


def _check(data: RawEvent, event_type: str, fields: _Fields) -> None:
    """The slow path: some field is not of its exact kind; raise for the first invalid."""
    for key, kind in fields:
        if type(data.get(key)) is not kind:
            require(data, key, kind, event_type)


# Each reader tests the exact types inline (the fast path, one event in thousands fails
# it) and leaves the rest to _check, so a valid event costs one call: the dict is returned
# as the view it was just checked to be ("type: ignore" where typing.cast would be a
# second call per event).


def read_response_event(data: RawEvent, event_type: str) -> ResponseEvent:
    if type(data.get("response")) is not dict:
        require(data, "response", dict, event_type)
    return data  # type: ignore[return-value]


_ITEM: _Fields = (("item", dict), ("output_index", int))


def read_output_item(data: RawEvent, event_type: str) -> OutputItemEvent:
    if type(data.get("item")) is not dict or type(data.get("output_index")) is not int:
        _check(data, event_type, _ITEM)
    return data  # type: ignore[return-value]


_CONTENT_DELTA: _Fields = (("output_index", int), ("content_index", int), ("delta", str))
_TEXT_DONE: _Fields = (("output_index", int), ("content_index", int), ("text", str))
_REFUSAL_DONE: _Fields = (("output_index", int), ("content_index", int), ("refusal", str))
_SUMMARY_DELTA: _Fields = (("output_index", int), ("summary_index", int), ("delta", str))
_SUMMARY_DONE: _Fields = (("output_index", int), ("summary_index", int), ("text", str))


def read_output_text_delta(data: RawEvent) -> OutputTextDelta:
    if (
        type(data.get("output_index")) is not int
        or type(data.get("content_index")) is not int
        or type(data.get("delta")) is not str
    ):
        _check(data, "response.output_text.delta", _CONTENT_DELTA)
    return data  # type: ignore[return-value]


def read_output_text_done(data: RawEvent) -> OutputTextDone:
    if (
        type(data.get("output_index")) is not int
        or type(data.get("content_index")) is not int
        or type(data.get("text")) is not str
    ):
        _check(data, "response.output_text.done", _TEXT_DONE)
    return data  # type: ignore[return-value]


def read_refusal_delta(data: RawEvent) -> RefusalDelta:
    if (
        type(data.get("output_index")) is not int
        or type(data.get("content_index")) is not int
        or type(data.get("delta")) is not str
    ):
        _check(data, "response.refusal.delta", _CONTENT_DELTA)
    return data  # type: ignore[return-value]


def read_refusal_done(data: RawEvent) -> RefusalDone:
    if (
        type(data.get("output_index")) is not int
        or type(data.get("content_index")) is not int
        or type(data.get("refusal")) is not str
    ):
        _check(data, "response.refusal.done", _REFUSAL_DONE)
    return data  # type: ignore[return-value]


def read_summary_delta(data: RawEvent) -> ReasoningSummaryTextDelta:
    if (
        type(data.get("output_index")) is not int
        or type(data.get("summary_index")) is not int
        or type(data.get("delta")) is not str
    ):
        _check(data, "response.reasoning_summary_text.delta", _SUMMARY_DELTA)
    return data  # type: ignore[return-value]


def read_summary_done(data: RawEvent) -> ReasoningSummaryTextDone:
    if (
        type(data.get("output_index")) is not int
        or type(data.get("summary_index")) is not int
        or type(data.get("text")) is not str
    ):
        _check(data, "response.reasoning_summary_text.done", _SUMMARY_DONE)
    return data  # type: ignore[return-value]


_ARGUMENTS_DELTA: _Fields = (("output_index", int), ("delta", str))
_ARGUMENTS_DONE: _Fields = (("output_index", int), ("arguments", str))


def read_arguments_delta(
    data: RawEvent, event_type: str = "response.function_call_arguments.delta"
) -> FunctionCallArgumentsDelta:
    """Also ``response.custom_tool_call_input.delta``: a custom call's input piece, the
    same fields."""
    if type(data.get("output_index")) is not int or type(data.get("delta")) is not str:
        _check(data, event_type, _ARGUMENTS_DELTA)
    return data  # type: ignore[return-value]


def read_arguments_done(data: RawEvent) -> FunctionCallArgumentsDone:
    if type(data.get("output_index")) is not int or type(data.get("arguments")) is not str:
        _check(data, "response.function_call_arguments.done", _ARGUMENTS_DONE)
    return data  # type: ignore[return-value]


_INPUT_DONE: _Fields = (("output_index", int), ("input", str))


def read_input_done(data: RawEvent) -> CustomToolCallInputDone:
    if type(data.get("output_index")) is not int or type(data.get("input")) is not str:
        _check(data, "response.custom_tool_call_input.done", _INPUT_DONE)
    return data  # type: ignore[return-value]


def read_failed(data: RawEvent) -> ResponseFailed:
    return data  # type: ignore[return-value]  # every field is checked where it is read


def read_error(data: RawEvent) -> ErrorEvent:
    return data  # type: ignore[return-value]  # every field is checked where it is read


# --- produced: Chat Completions --------------------------------------------------------

FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]


class FunctionDelta(TypedDict, total=False):
    name: str
    arguments: str


class CustomDelta(TypedDict, total=False):
    name: str
    input: str


class ToolCallDelta(TypedDict):
    """A call's first delta carries ``id``, ``type`` and ``function.name`` (a custom
    call in the custom form: ``custom.name``); later ones only ``index`` and argument
    (input) pieces."""

    index: int
    id: NotRequired[str]
    type: NotRequired[Literal["function", "custom"]]
    function: NotRequired[FunctionDelta]
    custom: NotRequired[CustomDelta]


class ChunkDelta(TypedDict, total=False):
    role: Literal["assistant"]
    content: str
    refusal: str
    reasoning_content: str
    tool_calls: list[ToolCallDelta]


class ChunkChoice(TypedDict):
    index: int
    delta: ChunkDelta
    finish_reason: FinishReason | None
    logprobs: None


class PromptTokensDetails(TypedDict):
    cached_tokens: int
    cache_write_tokens: NotRequired[int]


class CompletionTokensDetails(TypedDict):
    reasoning_tokens: int


class ChatUsage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails
    completion_tokens_details: CompletionTokensDetails


class ChatCompletionChunk(TypedDict):
    """One ``chat.completion.chunk``; the usage chunk has ``choices: []``. ``usage`` is
    present (``null`` but in the usage chunk) exactly when the client asked for it."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: NotRequired[ChatUsage | None]


class ChatFunction(TypedDict):
    name: str
    arguments: str


class FunctionToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: ChatFunction


class ChatCustom(TypedDict):
    name: str
    input: str


class CustomToolCall(TypedDict):
    """The Chat API's custom tool call (the SDK's ``ChatCompletionMessageCustomToolCall``)."""

    id: str
    type: Literal["custom"]
    custom: ChatCustom


ToolCall = FunctionToolCall | CustomToolCall


class ChatMessage(TypedDict):
    role: Literal["assistant"]
    content: str | None
    refusal: str | None
    tool_calls: NotRequired[list[ToolCall]]
    reasoning_content: NotRequired[str]


class CompletionChoice(TypedDict):
    index: int
    message: ChatMessage
    finish_reason: FinishReason
    logprobs: None


class ChatCompletion(TypedDict):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: NotRequired[ChatUsage]
