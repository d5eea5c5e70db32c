"""Building a thinking-mode Chat Completions answer: the ``chat.completion`` and its chunks.

Pure: the request body, the script, the planned output (the same :mod:`scripts` output
specs the Responses path uses), a seeded ``random.Random`` and a minting callable go in; a
:class:`ChatReply` (status, frames, what each frame carries) comes out.

The planned output becomes one assistant message: reasoning items give the text of
``reasoning_content`` (:func:`reasoning_text`), messages' texts are joined into
``content``, refusals into ``refusal``, function calls become ``tool_calls``. Streaming
follows DeepSeek: the first chunk carries ``role`` and an empty ``reasoning_content``, then
``delta.reasoning_content`` pieces, then ``delta.content`` pieces, then each tool call (its
``index``, ``id``, ``type`` and ``function.name`` with empty arguments first, then argument
pieces), then a chunk with an empty delta and the ``finish_reason``; with
``stream_options.include_usage`` every chunk has ``usage: null`` and one more chunk with
``choices: []`` carries the usage; ``data: [DONE]`` ends the stream.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fakeupstream.events import split_text
from fakeupstream.scripts import FunctionCall, Message, OutputSpec, Reasoning, Refusal, Script

# (reasoning text, the visible assistant message) -> the reasoning_content to send
MintReasoning = Callable[[str, Mapping[str, Any]], str]

DONE = "[DONE]"
FINGERPRINT = "fp_fakeupstream_thinking"


@dataclass(frozen=True)
class ChatReply:
    status: int
    frames: list[bytes]  # one per SSE chunk; a JSON body is one frame
    parsed: list[Any]  # what each frame carries ("[DONE]" for the last SSE frame)
    stream: bool = False


def chat_frame(chunk: Mapping[str, Any] | str) -> bytes:
    """``data: <compact json>\\n\\n`` (no ``event:`` line), or ``data: [DONE]\\n\\n``."""
    data = chunk if isinstance(chunk, str) else json.dumps(chunk, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def reasoning_text(output: Sequence[OutputSpec], default: str) -> str:
    """The text of ``reasoning_content`` before signing.

    Each reasoning item gives its ``text`` or, without one, its summary parts joined by
    blank lines; items are joined by blank lines. No reasoning item, or none with either,
    gives ``default`` (a thinking model always thinks); an explicit ``text: ""`` and nothing
    else gives empty reasoning.
    """
    texts = []
    for spec in output:
        if isinstance(spec, Reasoning):
            if spec.text is not None:
                texts.append(spec.text)
            elif spec.summary:
                texts.append("\n\n".join(spec.summary))
    if not texts:
        return default
    return "\n\n".join(text for text in texts if text)


def call_id(rng: random.Random) -> str:
    alphabet = string.ascii_letters + string.digits
    return "call_" + "".join(rng.choice(alphabet) for _ in range(24))


def build_chat(
    body: Mapping[str, Any],
    script: Script,
    output: Sequence[OutputSpec],
    *,
    rng: random.Random,
    created: int,
    default_reasoning: str,
    mint: MintReasoning,
) -> ChatReply:
    completion_id = f"chatcmpl-{rng.getrandbits(128):032x}"
    text = "".join(spec.text for spec in output if isinstance(spec, Message))
    refusal = "".join(spec.text for spec in output if isinstance(spec, Refusal))
    calls: list[dict[str, Any]] = [
        {
            "id": spec.call_id or call_id(rng),
            "type": "function",
            "function": {"name": spec.name, "arguments": spec.arguments},
        }
        for spec in output
        if isinstance(spec, FunctionCall)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    reasoning = mint(reasoning_text(output, default_reasoning), message)
    message = {"role": "assistant", "content": message["content"], "reasoning_content": reasoning}
    if refusal:
        message["refusal"] = refusal
    if calls:
        message["tool_calls"] = calls
    finish = _finish_reason(script, bool(calls))
    usage = chat_usage(body, reasoning, text + refusal, calls, script.usage)
    model = str(body.get("model"))
    head = {"id": completion_id, "created": created, "model": model}
    failure = _failure(script)

    if body.get("stream") is not True:
        if failure is not None:
            return ChatReply(500, [_json_bytes(failure, indent=4)], [failure])
        completion = {
            "id": completion_id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
            ],
            "usage": usage,
            "system_fingerprint": FINGERPRINT,
        }
        return ChatReply(200, [_json_bytes(completion, indent=2)], [completion])

    options = body.get("stream_options")
    include_usage = isinstance(options, Mapping) and options.get("include_usage") is True
    pieces = _Pieces(script)
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": None, "reasoning_content": ""}]
    deltas += [{"content": None, "reasoning_content": p} for p in pieces(reasoning)]
    deltas += [{"content": p, "reasoning_content": None} for p in pieces(text)]
    deltas += [{"refusal": p} for p in pieces(refusal)]
    for index, call in enumerate(calls):
        function = call["function"]
        first = {"index": index, "id": call["id"], "type": "function"}
        deltas.append(
            {"tool_calls": [{**first, "function": {"name": function["name"], "arguments": ""}}]}
        )
        for piece in pieces(function["arguments"], default_size=8):
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    chunks = [_chunk(head, delta, None, include_usage) for delta in deltas]
    chunks.append(_chunk(head, {}, finish, include_usage))
    if include_usage:
        chunks.append({**_chunk(head, None, None, False), "choices": [], "usage": usage})
    parsed: list[Any] = list(chunks)
    if failure is not None:
        # Cut where scripted, else before the finish chunk: a failed generation never ends.
        error = script.error_event
        cut = error.after_events if error is not None else None
        del parsed[cut if cut is not None else len(deltas) :]
        parsed.append(failure)
    else:
        parsed.append(DONE)
    return ChatReply(200, [chat_frame(item) for item in parsed], parsed, stream=True)


def _chunk(
    head: Mapping[str, Any], delta: dict[str, Any] | None, finish: str | None, usage: bool
) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": head["id"],
        "object": "chat.completion.chunk",
        "created": head["created"],
        "model": head["model"],
        "system_fingerprint": FINGERPRINT,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if usage:
        chunk["usage"] = None
    return chunk


class _Pieces:
    def __init__(self, script: Script) -> None:
        self.script = script

    def __call__(self, text: str, default_size: int | None = None) -> list[str]:
        return split_text(text, self.script.delta_size or default_size, self.script.deltas)


def _finish_reason(script: Script, has_calls: bool) -> str:
    if script.status == "incomplete":
        return "length" if script.incomplete_reason == "max_output_tokens" else "content_filter"
    return "tool_calls" if has_calls else "stop"


def _failure(script: Script) -> dict[str, Any] | None:
    """The error envelope a failed generation ends with (``status: failed``, ``error_event``)."""
    if script.error_event is not None:
        event = script.error_event
        error = {"message": event.message, "type": "server_error", "param": event.param}
        return {"error": {**error, "code": event.code}}
    if script.status == "failed":
        error = {"message": script.error.message, "type": "server_error", "param": None}
        return {"error": {**error, "code": script.error.code}}
    return None


def _json_bytes(value: Any, *, indent: int) -> bytes:
    return json.dumps(value, indent=indent, ensure_ascii=False).encode()


def chat_usage(
    body: Mapping[str, Any],
    reasoning: str,
    visible_text: str,
    calls: Sequence[Mapping[str, Any]],
    overrides: Mapping[str, int],
) -> dict[str, Any]:
    """Plausible counts (about four characters a token) in Chat's shape, DeepSeek's extras too.

    A script's ``usage`` keys keep their Responses names: ``input_tokens`` sets
    ``prompt_tokens``, ``output_tokens`` ``completion_tokens``, ``cached_tokens`` the cache
    hits; ``reasoning_tokens`` and ``total_tokens`` keep theirs.
    """
    prompt = max(1, len(json.dumps(body.get("messages"), ensure_ascii=False)) // 4)
    reasoning_tokens = 16 + len(reasoning) // 4 if reasoning else 0
    visible = (1 + len(visible_text) // 4 if visible_text else 0) + sum(
        1 + len(str(c["function"]["arguments"])) // 4 for c in calls
    )
    prompt = overrides.get("input_tokens", prompt)
    reasoning_tokens = overrides.get("reasoning_tokens", reasoning_tokens)
    completion = overrides.get("output_tokens", reasoning_tokens + visible)
    cached = overrides.get("cached_tokens", 0)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": overrides.get("total_tokens", prompt + completion),
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "prompt_cache_hit_tokens": cached,
        "prompt_cache_miss_tokens": max(0, prompt - cached),
    }
