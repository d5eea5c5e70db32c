"""The Chat shapes the translation makes (and the one Responses item shape it reads).

The Responses events it consumes are typed where they are decoded, once per event:
:mod:`relay.core.responses_events`.

:class:`ChatCompletionChunk` and :class:`ChatCompletion` are the shapes the converter and
:func:`~relay.translate.responses_to_chat.response_to_chat_completion` build; key order is
the wire order (``chat_sse`` relies on it for its frame templates).
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

# --- read from a Responses item --------------------------------------------------------


class FunctionCall(TypedDict):
    """The fields of a ``function_call`` output item the Chat side carries (for a
    ``custom_tool_call`` item: its raw ``input`` as ``arguments``)."""

    call_id: str
    name: str
    arguments: str


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
