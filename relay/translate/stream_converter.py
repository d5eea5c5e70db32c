"""Responses SSE events → ``chat.completion.chunk`` dicts: one state machine, no I/O.

Feed each upstream event, decoded (:func:`relay.core.responses_events.decode`), to
:meth:`ChatStreamConverter.feed`; send the chunks it
returns, in order. The converter:

- sends ``{"role": "assistant", "content": ""}`` first (on ``response.created``, or just
  before the first other chunk when that event is missing);
- maps text, refusal and (when enabled) reasoning-summary deltas to ``content``,
  ``refusal`` and ``reasoning_content`` deltas of choice 0, whatever message item they come
  from; summary parts are separated by a blank line, as in the JSON answer;
- announces each function call once (``index``, ``id``, ``type``, ``function.name``,
  ``arguments: ""``), then streams its argument pieces under the same ``index``;
- does the same for each custom tool call (``response.output_item.added`` announces it,
  ``response.custom_tool_call_input.delta`` pieces follow), in the form asked for: as a
  function call whose arguments are the raw input (the default), or as the Chat API's
  ``{"type": "custom", "custom": {"name", "input"}}``; the input is passed on byte for
  byte, never read as JSON;
- catches up on text the deltas never carried: when a ``.done`` event, a finished item or
  the terminal response holds text that *extends* what was sent, the missing tail is sent;
  text that contradicts what was sent is left alone (the deltas are what the client saw);
- on ``response.completed``/``response.incomplete`` sends the finish chunk, then the usage
  chunk (``choices: []``) when ``include_usage`` is set — every other chunk then carries
  ``"usage": null``;
- raises :class:`UpstreamFailed` on ``response.failed``/``error`` and
  :class:`UpstreamProtocolError` on known events missing required fields.

Each event is a typed value (:mod:`relay.core.responses_events`, checked when decoded; a
:class:`~relay.core.responses_events.Malformed` one raises here), and the chunks are
:class:`~relay.translate.events.ChatCompletionChunk`: a field spelled wrong on either side
is a mypy error, not a wrong stream.

Unknown event types are ignored (forward compatible). After the terminal event the caller
should stop feeding; if it does not, further events are ignored and produce nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final, Literal

from relay.core.responses_events import (
    CustomToolCallInputDelta,
    CustomToolCallInputDone,
    ErrorEvent,
    FunctionCallArgumentsDelta,
    FunctionCallArgumentsDone,
    Malformed,
    OutputItemAdded,
    OutputItemDone,
    OutputTextDelta,
    OutputTextDone,
    RefusalDelta,
    RefusalDone,
    ResponseCompleted,
    ResponseCreated,
    ResponseFailed,
    ResponseIncomplete,
    ResponsesEvent,
    SummaryTextDelta,
    SummaryTextDone,
)
from relay.errors import UpstreamProtocolError
from relay.settings.custom_calls import CustomCallForm
from relay.translate.events import (
    ChatCompletionChunk,
    ChunkDelta,
    FinishReason,
    ToolCallDelta,
)
from relay.translate.responses_to_chat import (
    SUMMARY_SEPARATOR,
    finish_reason_for,
    function_call_fields,
    item_type,
    message_parts,
    output_items,
    summary_texts,
    upstream_failure,
    usage_to_chat,
)

# What a delta carries: text, a refusal, a reasoning summary, or a call's arguments.
_Kind = Literal["content", "refusal", "reasoning_content", "arguments"]
# (kind, output_index, content or summary index; 0 for arguments)
_Key = tuple[_Kind, int, int]
Chunk = ChatCompletionChunk
# Each handler takes the event class it is registered for (a dict of classes is one lookup
# per event; the key's class is the handler's parameter type).
_Handler = Callable[["ChatStreamConverter", Any], list[Chunk]]
# Events about a call's arguments (input): a damaged one names an unannounced call first.
_CALL_PIECES: Final = frozenset(
    {
        FunctionCallArgumentsDelta.type,
        FunctionCallArgumentsDone.type,
        CustomToolCallInputDelta.type,
        CustomToolCallInputDone.type,
    }
)


class ChatStreamConverter:
    def __init__(
        self,
        *,
        completion_id: str,
        created: int,
        model: str,
        include_usage: bool,
        reasoning_summaries: bool,
        custom_tool_calls: CustomCallForm = "function",
    ) -> None:
        # What every chunk shares (a dict display of them is faster than unpacking a dict).
        self._id = completion_id
        self._created = created
        self._model = model
        self._include_usage = include_usage
        self._summaries = reasoning_summaries
        self._custom_form = custom_tool_calls
        self._role_sent = False
        # Text (or arguments) sent so far, per part, as its pieces: appending to a list
        # costs the same at any length, where adding to a string copies all of it.
        self._sent: dict[_Key, list[str]] = {}
        self._last_summary: _Key | None = None
        self._calls: dict[int, int] = {}  # output_index → tool-call index in the chunks
        self._native: set[int] = set()  # output_index of calls sent in the custom form
        self._call_positions: dict[str, int] = {}  # call_id → output_index it was announced at
        self._positions: dict[str, int] = {}  # item id → output_index seen in the stream
        self.finished = False
        self.final_response: dict[str, Any] | None = None
        self.finish_reason: FinishReason | None = None

    @property
    def output_started(self) -> bool:
        """Whether a chunk with output (text, refusal, reasoning or a tool call) was made."""
        return bool(self._sent or self._calls)

    def feed(self, event: ResponsesEvent) -> list[Chunk]:
        """The chunks to send for one decoded upstream event, in order (often none)."""
        if self.finished:
            return []
        handler = self._HANDLERS.get(type(event))
        return handler(self, event) if handler else []

    # --- chunk building ---------------------------------------------------------------

    def _chunk(self, delta: ChunkDelta, finish_reason: FinishReason | None = None) -> Chunk:
        chunk: Chunk = {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "choices": [
                {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
            ],
        }
        if self._include_usage:
            chunk["usage"] = None
        return chunk

    def _with_role(self, chunks: list[Chunk]) -> list[Chunk]:
        """Prefix the role chunk if it has not been sent yet."""
        if self._role_sent:
            return chunks
        self._role_sent = True
        return [self._chunk({"role": "assistant", "content": ""}), *chunks]

    def _send_text(self, key: _Key, piece: str) -> list[Chunk]:
        kind, output_index, _ = key
        if not piece or (kind == "reasoning_content" and not self._summaries):
            return []
        pieces = self._sent.get(key)
        if pieces is None:
            self._sent[key] = [piece]
        else:
            pieces.append(piece)
        delta: ChunkDelta = {}
        if kind == "arguments":
            call: ToolCallDelta = {"index": self._calls[output_index]}
            if output_index in self._native:
                call["custom"] = {"input": piece}
            else:
                call["function"] = {"arguments": piece}
            delta["tool_calls"] = [call]
            return self._with_role([self._chunk(delta)])
        if kind == "reasoning_content":
            if self._last_summary not in (None, key):
                piece = SUMMARY_SEPARATOR + piece
            self._last_summary = key
        delta[kind] = piece
        return self._with_role([self._chunk(delta)])

    def _catch_up(self, key: _Key, full: str) -> list[Chunk]:
        """Send the tail of ``full`` beyond what was sent, if ``full`` extends it."""
        sent = "".join(self._sent.get(key, ()))
        if len(full) > len(sent) and full.startswith(sent):
            return self._send_text(key, full[len(sent) :])
        return []

    def _position(self, output_index: int, item_id: object) -> int:
        """The event's ``output_index``, remembered per item id for the terminal catch-up."""
        if isinstance(item_id, str):
            self._positions[item_id] = output_index
        return output_index

    # --- events -----------------------------------------------------------------------

    def _output_text_delta(self, event: OutputTextDelta) -> list[Chunk]:
        # The most frequent event by far: _position inlined.
        output_index = event.output_index
        if event.item_id is not None:
            self._positions[event.item_id] = output_index
        return self._send_text(("content", output_index, event.content_index), event.delta)

    def _output_text_done(self, event: OutputTextDone) -> list[Chunk]:
        output_index = self._position(event.output_index, event.item_id)
        return self._catch_up(("content", output_index, event.content_index), event.text)

    def _refusal_delta(self, event: RefusalDelta) -> list[Chunk]:
        output_index = self._position(event.output_index, event.item_id)
        return self._send_text(("refusal", output_index, event.content_index), event.delta)

    def _refusal_done(self, event: RefusalDone) -> list[Chunk]:
        output_index = self._position(event.output_index, event.item_id)
        return self._catch_up(("refusal", output_index, event.content_index), event.refusal)

    def _summary_delta(self, event: SummaryTextDelta) -> list[Chunk]:
        output_index = self._position(event.output_index, event.item_id)
        key: _Key = ("reasoning_content", output_index, event.summary_index)
        return self._send_text(key, event.delta)

    def _summary_done(self, event: SummaryTextDone) -> list[Chunk]:
        output_index = self._position(event.output_index, event.item_id)
        key: _Key = ("reasoning_content", output_index, event.summary_index)
        return self._catch_up(key, event.text)

    def _response_created(self, event: ResponseCreated) -> list[Chunk]:
        return self._with_role([])

    def _item_added(self, event: OutputItemAdded) -> list[Chunk]:
        item = event.item
        output_index = self._position(event.output_index, item.get("id"))
        if item_type(item) not in ("function_call", "custom_tool_call"):
            return []
        return self._function_call(output_index, item, final=False)

    def _item_done(self, event: OutputItemDone) -> list[Chunk]:
        item = event.item
        return self._finished_item(self._position(event.output_index, item.get("id")), item)

    def _finished_item(self, output_index: int, item: Mapping[str, Any]) -> list[Chunk]:
        """Catch up on whatever a finished item holds that the deltas did not carry."""
        kind = item_type(item)
        chunks: list[Chunk] = []
        if kind in ("function_call", "custom_tool_call"):
            chunks = self._function_call(output_index, item, final=True)
        elif kind == "message":
            for i, (part_kind, text) in enumerate(message_parts(item)):
                if part_kind:
                    chunks += self._catch_up((part_kind, output_index, i), text)
        elif kind == "reasoning":
            for i, text in enumerate(summary_texts(item)):
                chunks += self._catch_up(("reasoning_content", output_index, i), text)
        return chunks

    def _function_call(
        self, output_index: int, item: Mapping[str, Any], *, final: bool
    ) -> list[Chunk]:
        """A function or custom tool call: announced once, then its arguments (input)."""
        fields = function_call_fields(item, need_arguments=final)
        # One call, one announcement, even if it shows up again at another position.
        output_index = self._call_positions.setdefault(fields["call_id"], output_index)
        chunks: list[Chunk] = []
        if output_index not in self._calls:
            self._calls[output_index] = len(self._calls)
            announce: ToolCallDelta = {"index": self._calls[output_index], "id": fields["call_id"]}
            if item.get("type") == "custom_tool_call" and self._custom_form == "custom":
                self._native.add(output_index)
                announce["type"] = "custom"
                announce["custom"] = {"name": fields["name"], "input": ""}
            else:
                announce["type"] = "function"
                announce["function"] = {"name": fields["name"], "arguments": ""}
            chunks = self._with_role([self._chunk({"tool_calls": [announce]})])
        return chunks + self._catch_up(("arguments", output_index, 0), fields["arguments"])

    def _announced_call(self, event_type: str, output_index: int) -> int:
        """The output_index of an arguments event, which must be an announced call."""
        if output_index not in self._calls:
            raise UpstreamProtocolError(
                f"upstream event {event_type} refers to output {output_index}, "
                "which is not an announced function or custom tool call"
            )
        return output_index

    def _arguments_delta(
        self, event: FunctionCallArgumentsDelta | CustomToolCallInputDelta
    ) -> list[Chunk]:
        """A function call's arguments piece, or a custom call's input piece."""
        output_index = self._announced_call(event.type, event.output_index)
        return self._send_text(("arguments", output_index, 0), event.delta)

    def _arguments_done(
        self, event: FunctionCallArgumentsDone | CustomToolCallInputDone
    ) -> list[Chunk]:
        output_index = self._announced_call(event.type, event.output_index)
        full = event.arguments if isinstance(event, FunctionCallArgumentsDone) else event.input
        return self._catch_up(("arguments", output_index, 0), full)

    def _malformed(self, event: Malformed) -> list[Chunk]:
        if event.type in _CALL_PIECES:  # an unannounced call is named before a damaged field
            output_index = event.data.get("output_index")
            if type(output_index) is int:
                self._announced_call(event.type, output_index)
        raise UpstreamProtocolError(event.problem)

    def _terminal(self, event: ResponseCompleted | ResponseIncomplete) -> list[Chunk]:
        response = event.response
        finish_reason_for(response, has_tool_calls=False)  # raise before sending anything more
        chunks: list[Chunk] = []
        # Some deployments fill only the final response: send what the stream left out.
        # Items seen in the stream are matched by id, the others by position.
        for position, item in enumerate(output_items(response)):
            item_id = item.get("id")
            output_index = self._positions.get(item_id, position) if item_id else position
            chunks += self._finished_item(output_index, item)
        reason = finish_reason_for(response, has_tool_calls=bool(self._calls))
        chunks = self._with_role([*chunks, self._chunk({}, reason)])
        usage = usage_to_chat(response.get("usage"))
        if self._include_usage and usage is not None:
            chunks.append(
                {
                    "id": self._id,
                    "object": "chat.completion.chunk",
                    "created": self._created,
                    "model": self._model,
                    "choices": [],
                    "usage": usage,
                }
            )
        self.finished = True
        self.final_response = response
        self.finish_reason = reason
        return chunks

    def _failed(self, event: ResponseFailed) -> list[Chunk]:
        response = event.response
        error = response.get("error") if isinstance(response, Mapping) else None
        raise upstream_failure(error, "upstream response failed")

    def _error(self, event: ErrorEvent) -> list[Chunk]:
        error = {"code": event.code, "message": event.message}
        raise upstream_failure(error, "upstream reported an error")

    _HANDLERS: ClassVar[dict[type, _Handler]] = {
        OutputTextDelta: _output_text_delta,
        OutputTextDone: _output_text_done,
        RefusalDelta: _refusal_delta,
        RefusalDone: _refusal_done,
        SummaryTextDelta: _summary_delta,
        SummaryTextDone: _summary_done,
        ResponseCreated: _response_created,
        OutputItemAdded: _item_added,
        OutputItemDone: _item_done,
        FunctionCallArgumentsDelta: _arguments_delta,
        FunctionCallArgumentsDone: _arguments_done,
        CustomToolCallInputDelta: _arguments_delta,
        CustomToolCallInputDone: _arguments_done,
        ResponseCompleted: _terminal,
        ResponseIncomplete: _terminal,
        ResponseFailed: _failed,
        ErrorEvent: _error,
        Malformed: _malformed,
    }
