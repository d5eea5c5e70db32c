"""What the client got from the relay, reduced to what the checks need.

A :class:`ChatAnswer` is filled incrementally (frame by frame) by the raw client, or at
once from a JSON body. :attr:`ChatAnswer.outcome` is the client's point of view, which the
"no false success" check compares with what the upstream really did:

- ``success``: JSON 200 with a choice, or a stream that ended with ``[DONE]`` and no error;
- ``error``: an HTTP error status, or an error frame mid-stream;
- ``cut``: a stream that ended with neither ``[DONE]`` nor an error frame;
- ``disconnected``: the client itself left before the end.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ChatAnswer:
    status: int | None = None
    frames: list[dict[str, Any] | str] = field(default_factory=list)  # parsed data frames
    comments: int = 0  # SSE keepalive comments
    done: bool = False  # saw data: [DONE]
    error: dict[str, Any] | None = None  # error envelope (HTTP body or error frame)
    frames_after_done: int = 0
    json_body: Any = None
    text: str = ""
    refusal: str = ""
    reasoning: str = ""  # reasoning_content shown (thinking); assistant_message() drops it
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    completion_id: str | None = None
    trailing_bytes: int = 0  # bytes after the last complete frame
    eof: bool = False
    disconnected: bool = False
    bad_frames: int = 0  # data lines that were not JSON
    request_id: str | None = None  # the relay's x-request-id (its log lines carry it)

    @property
    def outcome(self) -> str:
        if self.disconnected:
            return "disconnected"
        if self.status is None:
            return "cut"
        if self.status >= 400 or self.error is not None:
            return "error"
        if self.json_body is not None:
            choices = self.json_body.get("choices") if isinstance(self.json_body, dict) else None
            return "success" if choices else "error"
        return "success" if self.done else "cut"

    def set_json_body(self, raw: bytes) -> None:
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            self.error = {"message": "answer body is not JSON", "raw": raw[:200].decode("latin-1")}
            return
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            self.error = body["error"]
            return
        self.json_body = body
        if not isinstance(body, dict):
            return
        self.completion_id = body.get("id")
        for choice in body.get("choices") or []:
            message = choice.get("message") or {}
            self.text += message.get("content") or ""
            self.refusal += message.get("refusal") or ""
            self.reasoning += _text(message.get("reasoning_content"))
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                self.tool_calls.append(
                    {
                        "id": call.get("id"),
                        "name": function.get("name"),
                        "arguments": function.get("arguments", ""),
                    }
                )
            self.finish_reason = choice.get("finish_reason") or self.finish_reason

    def summary(self) -> dict[str, Any]:
        """The history's ``client_answer`` fields."""
        return {
            "status": self.status,
            "outcome": self.outcome,
            "text": self.text,
            "refusal": self.refusal,
            "reasoning": self.reasoning,
            "tool_calls": self.tool_calls,
            "finish_reason": self.finish_reason,
            "frames": len(self.frames),
            "comments": self.comments,
            "done": self.done,
            "frames_after_done": self.frames_after_done,
            "error": self.error,
            "bad_frames": self.bad_frames,
            "trailing_bytes": self.trailing_bytes,
            "request_id": self.request_id,
        }

    def assistant_message(self) -> dict[str, Any]:
        """The assistant message a client like Cursor appends to its history: content,
        refusal and tool calls; the ``reasoning_content`` it was shown is dropped, as
        Cursor drops it (``KeepReasoning`` makes a client that sends it back)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.refusal:
            message["refusal"] = self.refusal
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
                for call in self.tool_calls
            ]
        return message


def parse_sse_data(answer: ChatAnswer, data: str) -> None:
    """Fold one ``data:`` payload of a chat.completion.chunk stream into ``answer``."""
    if answer.done:
        answer.frames_after_done += 1
    if data == "[DONE]":
        answer.frames.append(data)
        answer.done = True
        return
    try:
        chunk = json.loads(data)
    except ValueError:
        answer.bad_frames += 1
        answer.frames.append(data)
        return
    answer.frames.append(chunk)
    if not isinstance(chunk, dict):
        answer.bad_frames += 1
        return
    if isinstance(chunk.get("error"), dict):
        answer.error = chunk["error"]
        return
    answer.completion_id = answer.completion_id or chunk.get("id")
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        answer.text += delta.get("content") or ""
        answer.refusal += delta.get("refusal") or ""
        answer.reasoning += _text(delta.get("reasoning_content"))
        for call in delta.get("tool_calls") or []:
            _merge_tool_call(answer.tool_calls, call)
        if choice.get("finish_reason"):
            answer.finish_reason = choice["finish_reason"]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _merge_tool_call(calls: list[dict[str, Any]], delta: dict[str, Any]) -> None:
    index = delta.get("index", len(calls))
    while len(calls) <= index:
        calls.append({"id": None, "name": None, "arguments": ""})
    call = calls[index]
    if delta.get("id"):
        call["id"] = delta["id"]
    function = delta.get("function") or {}
    if function.get("name"):
        call["name"] = function["name"]
    call["arguments"] += function.get("arguments") or ""
