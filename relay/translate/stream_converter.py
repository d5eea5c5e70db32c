"""Responses SSE events → ``chat.completion.chunk`` dicts: one state machine, no I/O.

Feed each decoded upstream event to :meth:`ChatStreamConverter.feed`; send the chunks it
returns, in order. The converter:

- sends ``{"role": "assistant", "content": ""}`` first (on ``response.created``, or just
  before the first other chunk when that event is missing);
- maps text, refusal and (when enabled) reasoning-summary deltas to ``content``,
  ``refusal`` and ``reasoning_content`` deltas of choice 0, whatever message item they come
  from; summary parts are separated by a blank line, as in the JSON answer;
- announces each function call once (``index``, ``id``, ``type``, ``function.name``,
  ``arguments: ""``), then streams its argument pieces under the same ``index``;
- catches up on text the deltas never carried: when a ``.done`` event, a finished item or
  the terminal response holds text that *extends* what was sent, the missing tail is sent;
  text that contradicts what was sent is left alone (the deltas are what the client saw);
- on ``response.completed``/``response.incomplete`` sends the finish chunk, then the usage
  chunk (``choices: []``) when ``include_usage`` is set — every other chunk then carries
  ``"usage": null``;
- raises :class:`UpstreamFailed` on ``response.failed``/``error`` and
  :class:`UpstreamProtocolError` on known events missing required fields.

Unknown event types are ignored (forward compatible). After the terminal event the caller
should stop feeding; if it does not, further events are ignored and produce nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from relay.errors import UpstreamProtocolError
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

# Text events: event type → (delta kind, index field, payload field, is the .done event).
TEXT_EVENTS: dict[str, tuple[str, str, str, bool]] = {
    "response.output_text.delta": ("content", "content_index", "delta", False),
    "response.output_text.done": ("content", "content_index", "text", True),
    "response.refusal.delta": ("refusal", "content_index", "delta", False),
    "response.refusal.done": ("refusal", "content_index", "refusal", True),
    "response.reasoning_summary_text.delta": ("reasoning_content", "summary_index", "delta", False),
    "response.reasoning_summary_text.done": ("reasoning_content", "summary_index", "text", True),
}

# (delta kind, output_index, content or summary index); kind "arguments" for call arguments
_Key = tuple[str, int, int]
Chunk = dict[str, Any]
_Handler = Callable[["ChatStreamConverter", str, Mapping[str, Any]], list[Chunk]]


def _field(data: Mapping[str, Any], key: str, kind: type, event_type: str) -> Any:
    value = data.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise UpstreamProtocolError(
            f"upstream event {event_type} has no valid '{key}' ({kind.__name__})"
        )
    return value


class ChatStreamConverter:
    def __init__(
        self,
        *,
        completion_id: str,
        created: int,
        model: str,
        include_usage: bool,
        reasoning_summaries: bool,
    ) -> None:
        self._base: Chunk = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
        }
        self._include_usage = include_usage
        self._summaries = reasoning_summaries
        self._role_sent = False
        # Text (or arguments) sent so far, per part, as its pieces: appending to a list
        # costs the same at any length, where adding to a string copies all of it.
        self._sent: dict[_Key, list[str]] = {}
        self._last_summary: _Key | None = None
        self._calls: dict[int, int] = {}  # output_index → tool-call index in the chunks
        self._call_positions: dict[str, int] = {}  # call_id → output_index it was announced at
        self._positions: dict[str, int] = {}  # item id → output_index seen in the stream
        self.finished = False
        self.final_response: dict[str, Any] | None = None
        self.finish_reason: str | None = None

    @property
    def output_started(self) -> bool:
        """Whether a chunk with output (text, refusal, reasoning or a tool call) was made."""
        return bool(self._sent or self._calls)

    def feed(self, event_type: str, data: Mapping[str, Any]) -> list[Chunk]:
        """The chunks to send for one upstream event, in order (often none)."""
        if self.finished:
            return []
        handler = self._HANDLERS.get(event_type)
        return handler(self, event_type, data) if handler else []

    # --- chunk building ---------------------------------------------------------------

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> Chunk:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        chunk: Chunk = {**self._base, "choices": [choice]}
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
        if kind == "arguments":
            call = {"index": self._calls[output_index], "function": {"arguments": piece}}
            return self._with_role([self._chunk({"tool_calls": [call]})])
        if kind == "reasoning_content":
            if self._last_summary not in (None, key):
                piece = SUMMARY_SEPARATOR + piece
            self._last_summary = key
        return self._with_role([self._chunk({kind: piece})])

    def _catch_up(self, key: _Key, full: str) -> list[Chunk]:
        """Send the tail of ``full`` beyond what was sent, if ``full`` extends it."""
        sent = "".join(self._sent.get(key, ()))
        if len(full) > len(sent) and full.startswith(sent):
            return self._send_text(key, full[len(sent) :])
        return []

    # --- events -----------------------------------------------------------------------

    def _text_event(self, event_type: str, data: Mapping[str, Any]) -> list[Chunk]:
        kind, index_field, payload_field, is_done = TEXT_EVENTS[event_type]
        output_index = self._position(data.get("item_id"), data, event_type)
        # An exact int or str is valid as it is; anything else goes through _field.
        part = data.get(index_field)
        if type(part) is not int:
            part = _field(data, index_field, int, event_type)
        text = data.get(payload_field)
        if type(text) is not str:
            text = _field(data, payload_field, str, event_type)
        key = (kind, output_index, part)
        return self._catch_up(key, text) if is_done else self._send_text(key, text)

    def _created(self, event_type: str, data: Mapping[str, Any]) -> list[Chunk]:
        _field(data, "response", dict, event_type)
        return self._with_role([])

    def _position(self, item_id: Any, data: Mapping[str, Any], event_type: str) -> int:
        """The event's ``output_index``, remembered per item id for the terminal catch-up."""
        output_index = data.get("output_index")
        if type(output_index) is not int:
            output_index = _field(data, "output_index", int, event_type)
        if isinstance(item_id, str):
            self._positions[item_id] = output_index
        return output_index

    def _item_added(self, event_type: str, data: Mapping[str, Any]) -> list[Chunk]:
        item = _field(data, "item", dict, event_type)
        output_index = self._position(item.get("id"), data, event_type)
        if item_type(item) != "function_call":
            return []
        return self._function_call(output_index, item, final=False)

    def _item_done(self, event_type: str, data: Mapping[str, Any]) -> list[Chunk]:
        item = _field(data, "item", dict, event_type)
        return self._finished_item(self._position(item.get("id"), data, event_type), item)

    def _finished_item(self, output_index: int, item: Mapping[str, Any]) -> list[Chunk]:
        """Catch up on whatever a finished item holds that the deltas did not carry."""
        kind = item_type(item)
        chunks: list[Chunk] = []
        if kind == "function_call":
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
        fields = function_call_fields(item, need_arguments=final)
        # One call, one announcement, even if it shows up again at another position.
        output_index = self._call_positions.setdefault(fields["call_id"], output_index)
        chunks: list[Chunk] = []
        if output_index not in self._calls:
            self._calls[output_index] = len(self._calls)
            announce = {
                "index": self._calls[output_index],
                "id": fields["call_id"],
                "type": "function",
                "function": {"name": fields["name"], "arguments": ""},
            }
            chunks = self._with_role([self._chunk({"tool_calls": [announce]})])
        return chunks + self._catch_up(("arguments", output_index, 0), fields["arguments"])

    def _arguments_event(self, event_type: str, data: Mapping[str, Any]) -> list[Chunk]:
        output_index = _field(data, "output_index", int, event_type)
        if output_index not in self._calls:
            raise UpstreamProtocolError(
                f"upstream event {event_type} refers to output {output_index}, "
                "which is not an announced function call"
            )
        key = ("arguments", output_index, 0)
        if event_type.endswith(".done"):
            return self._catch_up(key, _field(data, "arguments", str, event_type))
        return self._send_text(key, _field(data, "delta", str, event_type))

    def _terminal(self, event_type: str, data: Mapping[str, Any]) -> list[Chunk]:
        response = _field(data, "response", dict, event_type)
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
            chunks.append({**self._base, "choices": [], "usage": usage})
        self.finished = True
        self.final_response = response
        self.finish_reason = reason
        return chunks

    def _failed(self, event_type: str, data: Mapping[str, Any]) -> list[Chunk]:
        response = data.get("response")
        error = response.get("error") if isinstance(response, Mapping) else None
        raise upstream_failure(error, "upstream response failed")

    def _error(self, event_type: str, data: Mapping[str, Any]) -> list[Chunk]:
        raise upstream_failure(data, "upstream reported an error")

    _HANDLERS: ClassVar[dict[str, _Handler]] = {
        **dict.fromkeys(TEXT_EVENTS, _text_event),
        "response.created": _created,
        "response.output_item.added": _item_added,
        "response.output_item.done": _item_done,
        "response.function_call_arguments.delta": _arguments_event,
        "response.function_call_arguments.done": _arguments_event,
        "response.completed": _terminal,
        "response.incomplete": _terminal,
        "response.failed": _failed,
        "error": _error,
    }
