"""Building what the fake sends: the Response object and its exact SSE event sequence.

Pure: the request body, the planned output and a seeded ``random.Random`` go in; a
:class:`Generation` comes out. Field order follows real OpenAI streams (see the recordings
under ``tests/fixtures/cursor-recordings``): ``type`` then ``sequence_number`` then the
rest, ``logprobs: []`` on output text, ``annotations: []`` on text parts, and an
``obfuscation`` padding field on delta events unless ``stream_options.include_obfuscation``
is false.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fakeupstream.ciphertext import Follower, text_digest
from fakeupstream.rules import is_reasoning_model
from fakeupstream.scripts import (
    CustomToolCall,
    FunctionCall,
    Message,
    OutputSpec,
    Reasoning,
    Refusal,
    Script,
)

# (item_id, secret, followers, shown) -> a fresh token; called again for a second, different
# one. ``shown``: the visible items the response put before the reasoning item, in input form.
Mint = Callable[[str, str, tuple[Follower, ...], tuple[dict[str, Any], ...]], str]

ENCRYPTED = "reasoning.encrypted_content"


def sse_frame(event: Mapping[str, Any]) -> bytes:
    """``event: <type>\\ndata: <compact json>\\n\\n``, as OpenAI frames every event."""
    data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    return f"event: {event['type']}\ndata: {data}\n\n".encode()


class IdMaker:
    """OpenAI-looking ids: prefix, creation time in hex, random hex, a per-response suffix."""

    def __init__(self, rng: random.Random, created_at: int) -> None:
        self._rng = rng
        self._stamp = f"{created_at & 0xFFFFFFFF:08x}"
        self._suffix = f"{rng.getrandbits(64):016x}"

    def item(self, prefix: str) -> str:
        return f"{prefix}_{self._stamp}{self._rng.getrandbits(96):024x}{self._suffix}"

    def call_id(self) -> str:
        alphabet = string.ascii_letters + string.digits
        return "call_" + "".join(self._rng.choice(alphabet) for _ in range(24))


@dataclass
class Generation:
    response: dict[str, Any]  # the final Response (terminal event, JSON body)
    events: list[dict[str, Any]]  # every SSE event in order, sequence numbers set
    json_status: int = 200
    json_body: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Planned:
    spec: OutputSpec
    item_id: str
    call_id: str = ""
    secret: str = ""
    done_token: str | None = None  # encrypted_content in output_item.done
    final_token: str | None = None  # ... in response.completed / the JSON body


def build(
    body: Mapping[str, Any],
    script: Script,
    output: Sequence[OutputSpec],
    *,
    rng: random.Random,
    created_at: int,
    mint: Mint,
    counts: Mapping[str, int] | None = None,
) -> Generation:
    """``counts``: measured usage (input and cached tokens, :mod:`prompt_cache`); the
    script's ``usage`` still wins over it."""
    ids = IdMaker(rng, created_at)
    response_id = ids.item("resp")
    planned = _plan(output, ids, rng)
    include = ENCRYPTED in (body.get("include") or [])
    _mint_all(planned, script.ciphertext, mint)
    writer = _Writer(body, script, rng)

    events: list[dict[str, Any]] = []
    start = response_object(body, response_id=response_id, created_at=created_at)
    events.append({"type": "response.created", "response": start})
    events.append({"type": "response.in_progress", "response": start})
    final_items = []
    for index, item in enumerate(planned):
        last = index == len(planned) - 1
        truncated = last and script.status == "incomplete"
        done, item_events = writer.item(index, item, include=include, incomplete=truncated)
        events.extend(item_events)
        final = dict(done)
        if isinstance(item.spec, Reasoning) and include:
            final = _with_token(done, item.final_token)
        final_items.append(final)

    usage = _usage(body, planned, script.usage, counts or {})
    status = script.status
    final = response_object(
        body,
        response_id=response_id,
        created_at=created_at,
        status=status,
        output=final_items,
        usage=None if status == "failed" else usage,
        error=(
            {"code": script.error.code, "message": script.error.message}
            if status == "failed"
            else None
        ),
        incomplete_details=(
            {"reason": script.incomplete_reason} if status == "incomplete" else None
        ),
    )
    generation = Generation(response=final, events=events)
    error = script.error_event
    if error is not None:
        if error.after_events is not None:
            del events[error.after_events :]
        events.append(
            {"type": "error", "code": error.code, "message": error.message, "param": error.param}
        )
        generation.json_status = 500
        generation.json_body = {
            "error": {
                "message": error.message,
                "type": "server_error",
                "param": error.param,
                "code": error.code,
            }
        }
    else:
        events.append({"type": f"response.{status}", "response": final})
        generation.json_body = final
    generation.events = [_numbered(n, event) for n, event in enumerate(events)]
    return generation


def _numbered(number: int, event: Mapping[str, Any]) -> dict[str, Any]:
    rest = {k: v for k, v in event.items() if k != "type"}
    return {"type": event["type"], "sequence_number": number, **rest}


def _plan(output: Sequence[OutputSpec], ids: IdMaker, rng: random.Random) -> list[_Planned]:
    planned = []
    for spec in output:
        if isinstance(spec, Reasoning):
            planned.append(_Planned(spec, ids.item("rs"), secret=f"{rng.getrandbits(64):016x}"))
        elif isinstance(spec, FunctionCall):
            planned.append(_Planned(spec, ids.item("fc"), call_id=spec.call_id or ids.call_id()))
        elif isinstance(spec, CustomToolCall):
            planned.append(_Planned(spec, ids.item("ctc"), call_id=spec.call_id or ids.call_id()))
        else:
            planned.append(_Planned(spec, ids.item("msg")))
    return planned


def _mint_all(planned: list[_Planned], mode: str, mint: Mint) -> None:
    for index, item in enumerate(planned):
        if not isinstance(item.spec, Reasoning):
            continue
        followers = tuple(_follower(p) for p in planned[index + 1 :])
        shown = tuple(s for s in map(_shown, planned[:index]) if s is not None)
        item.final_token = mint(item.item_id, item.secret, followers, shown)
        if mode == "differ":
            item.done_token = mint(item.item_id, item.secret, followers, shown)
        elif mode == "normal":
            item.done_token = item.final_token


def _follower(item: _Planned) -> Follower:
    spec = item.spec
    if isinstance(spec, FunctionCall):
        return Follower("function_call", item.item_id, item.call_id)
    if isinstance(spec, CustomToolCall):
        return Follower("custom_tool_call", item.item_id, item.call_id)
    if isinstance(spec, Message | Refusal):
        return Follower("message", item.item_id, text_digest(spec.text))
    return Follower("reasoning", item.item_id, "")


def _shown(item: _Planned) -> dict[str, Any] | None:
    """An output item as the next request would carry it (None: reasoning, invisible)."""
    spec = item.spec
    if isinstance(spec, FunctionCall):
        return {
            "type": "function_call",
            "call_id": item.call_id,
            "name": spec.name,
            "arguments": spec.arguments,
        }
    if isinstance(spec, CustomToolCall):
        return {"type": "custom_tool_call", "call_id": item.call_id, "name": spec.name,
                "input": spec.input}  # fmt: skip
    if isinstance(spec, Refusal):
        content = [{"type": "refusal", "refusal": spec.text}]
        return {"type": "message", "role": "assistant", "content": content}
    if isinstance(spec, Message):
        return {"type": "message", "role": "assistant", "content": spec.text}
    return None


def _with_token(item: Mapping[str, Any], token: str | None) -> dict[str, Any]:
    """The reasoning item with ``encrypted_content`` in OpenAI's place (after ``type``)."""
    if token is None:
        return {k: v for k, v in item.items() if k != "encrypted_content"}
    result: dict[str, Any] = {"id": item["id"], "type": item["type"], "encrypted_content": token}
    result.update({k: v for k, v in item.items() if k not in result})
    return result


class _Writer:
    """The events of one output item, from output_item.added to output_item.done."""

    def __init__(self, body: Mapping[str, Any], script: Script, rng: random.Random) -> None:
        reasoning = body.get("reasoning")
        self.summaries = isinstance(reasoning, Mapping) and reasoning.get("summary") is not None
        options = body.get("stream_options")
        self.obfuscate = not (
            isinstance(options, Mapping) and options.get("include_obfuscation") is False
        )
        self.script = script
        self.rng = rng

    def item(
        self, index: int, item: _Planned, *, include: bool, incomplete: bool
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        spec = item.spec
        if isinstance(spec, Reasoning):
            return self._reasoning(index, item, spec, include)
        if isinstance(spec, FunctionCall):
            return self._function_call(index, item, spec, incomplete)
        if isinstance(spec, CustomToolCall):
            return self._custom_tool_call(index, item, spec)
        return self._message(index, item, spec, incomplete)

    def _reasoning(
        self, index: int, item: _Planned, spec: Reasoning, include: bool
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        added = {"id": item.item_id, "type": "reasoning", "summary": []}
        events = [_item_event("added", index, added)]
        summary = list(spec.summary) if self.summaries else []
        where = {"item_id": item.item_id, "output_index": index}
        for n, text in enumerate(summary):
            part = {"type": "summary_text", "text": ""}
            at = {**where, "summary_index": n}
            events.append({"type": "response.reasoning_summary_part.added", **at, "part": part})
            for piece in self._pieces(text):
                events.append(
                    {"type": "response.reasoning_summary_text.delta", **at, **self._delta(piece)}
                )
            events.append({"type": "response.reasoning_summary_text.done", **at, "text": text})
            done_part = {"type": "summary_text", "text": text}
            events.append({"type": "response.reasoning_summary_part.done", **at, "part": done_part})
        done: dict[str, Any] = {
            "id": item.item_id,
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": text} for text in summary],
        }
        if include:
            done = _with_token(done, item.done_token)
        events.append(_item_event("done", index, done))
        return done, events

    def _message(
        self, index: int, item: _Planned, spec: Message | Refusal, incomplete: bool
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        phase = {"phase": spec.phase} if isinstance(spec, Message) and spec.phase else {}
        shell = {"id": item.item_id, "type": "message", "status": "in_progress", "content": []}
        events = [_item_event("added", index, {**shell, "role": "assistant", **phase})]
        at = {"item_id": item.item_id, "output_index": index, "content_index": 0}
        if isinstance(spec, Refusal):
            empty: dict[str, Any] = {"type": "refusal", "refusal": ""}
            part: dict[str, Any] = {"type": "refusal", "refusal": spec.text}
            kind, final_key, extra = "refusal", "refusal", dict[str, Any]()
        else:
            empty = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
            part = {"type": "output_text", "annotations": [], "logprobs": [], "text": spec.text}
            kind, final_key, extra = "output_text", "text", {"logprobs": []}
        events.append({"type": "response.content_part.added", **at, "part": empty})
        for piece in self._pieces(spec.text):
            events.append({"type": f"response.{kind}.delta", **at, **self._delta(piece, extra)})
        events.append({"type": f"response.{kind}.done", **at, final_key: spec.text, **extra})
        events.append({"type": "response.content_part.done", **at, "part": part})
        status = "incomplete" if incomplete else "completed"
        done = {**shell, "status": status, "content": [part], "role": "assistant", **phase}
        events.append(_item_event("done", index, done))
        return done, events

    def _function_call(
        self, index: int, item: _Planned, spec: FunctionCall, incomplete: bool
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        def shape(status: str, arguments: str) -> dict[str, Any]:
            return {
                "id": item.item_id,
                "type": "function_call",
                "status": status,
                "arguments": arguments,
                "call_id": item.call_id,
                "name": spec.name,
            }

        events = [_item_event("added", index, shape("in_progress", ""))]
        at = {"item_id": item.item_id, "output_index": index}
        for piece in self._pieces(spec.arguments, default_size=8):
            delta = self._delta(piece)
            events.append({"type": "response.function_call_arguments.delta", **at, **delta})
        events.append(
            {"type": "response.function_call_arguments.done", **at, "arguments": spec.arguments}
        )
        done = shape("incomplete" if incomplete else "completed", spec.arguments)
        events.append(_item_event("done", index, done))
        return done, events

    def _custom_tool_call(
        self, index: int, item: _Planned, spec: CustomToolCall
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        # The SDK's ResponseCustomToolCall has no status: the item is the same shape
        # added (input "") and done; the input streams as custom_tool_call_input events.
        def shape(text: str) -> dict[str, Any]:
            return {
                "id": item.item_id,
                "type": "custom_tool_call",
                "call_id": item.call_id,
                "input": text,
                "name": spec.name,
            }

        events = [_item_event("added", index, shape(""))]
        at = {"item_id": item.item_id, "output_index": index}
        for piece in self._pieces(spec.input, default_size=8):
            delta = self._delta(piece)
            events.append({"type": "response.custom_tool_call_input.delta", **at, **delta})
        events.append({"type": "response.custom_tool_call_input.done", **at, "input": spec.input})
        done = shape(spec.input)
        events.append(_item_event("done", index, done))
        return done, events

    def _delta(self, piece: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        delta: dict[str, Any] = {"delta": piece, **(extra or {})}
        if self.obfuscate:
            alphabet = string.ascii_letters + string.digits
            length = max(2, 16 - len(piece))
            delta["obfuscation"] = "".join(self.rng.choice(alphabet) for _ in range(length))
        return delta

    def _pieces(self, text: str, default_size: int | None = None) -> list[str]:
        return split_text(text, self.script.delta_size or default_size, self.script.deltas)


def _item_event(stage: str, index: int, item: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": f"response.output_item.{stage}", "output_index": index, "item": dict(item)}


def split_text(text: str, size: int | None, count: int | None) -> list[str]:
    """Delta pieces: fixed ``size`` characters, ``count`` even pieces, or word by word."""
    if not text:
        return []
    if count is not None:
        count = min(count, len(text))
        bounds = [round(i * len(text) / count) for i in range(count + 1)]
        return [text[a:b] for a, b in itertools.pairwise(bounds)]
    if size is not None:
        return [text[i : i + size] for i in range(0, len(text), size)]
    return re.findall(r"\s*\S+|\s+", text)


def _usage(
    body: Mapping[str, Any],
    planned: Sequence[_Planned],
    overrides: Mapping[str, int],
    counts: Mapping[str, int],
) -> dict[str, Any]:
    """Plausible, deterministic token counts (about four characters a token): ``counts``
    over estimates, ``overrides`` over both."""
    input_tokens = max(1, len(json.dumps(body.get("input"), ensure_ascii=False)) // 4)
    reasoning_tokens = visible = 0
    for item in planned:
        spec = item.spec
        if isinstance(spec, Reasoning):
            reasoning_tokens += 16 + sum(len(s) for s in spec.summary) // 4
        elif isinstance(spec, FunctionCall):
            visible += 1 + len(spec.arguments) // 4
        elif isinstance(spec, CustomToolCall):
            visible += 1 + len(spec.input) // 4
        else:
            visible += 1 + len(spec.text) // 4
    values = {
        "input_tokens": input_tokens,
        "cached_tokens": 0,
        "cache_write_tokens": 0,
        "reasoning_tokens": reasoning_tokens,
        "output_tokens": reasoning_tokens + visible,
        **counts,
        **overrides,
    }
    if "cached_tokens" not in overrides:  # a scripted input_tokens may be smaller
        values["cached_tokens"] = min(values["cached_tokens"], values["input_tokens"])
    total = overrides.get("total_tokens", values["input_tokens"] + values["output_tokens"])
    return {
        "input_tokens": values["input_tokens"],
        "input_tokens_details": {
            "cached_tokens": values["cached_tokens"],
            "cache_write_tokens": values["cache_write_tokens"],
        },
        "output_tokens": values["output_tokens"],
        "output_tokens_details": {"reasoning_tokens": values["reasoning_tokens"]},
        "total_tokens": total,
    }


def response_object(
    body: Mapping[str, Any],
    *,
    response_id: str,
    created_at: int,
    status: str = "in_progress",
    output: list[dict[str, Any]] | None = None,
    usage: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    incomplete_details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Response echoing the request's settings, in OpenAI's field order."""
    model = str(body.get("model"))
    reasoning = body.get("reasoning") if isinstance(body.get("reasoning"), Mapping) else {}
    assert isinstance(reasoning, Mapping)
    if is_reasoning_model(model):
        echo_reasoning = {
            "effort": reasoning.get("effort") or "medium",
            "summary": reasoning.get("summary"),
        }
    else:
        echo_reasoning = {"effort": None, "summary": None}
    tier = body.get("service_tier") or "auto"
    if status != "in_progress" and tier == "auto":
        tier = "default"  # OpenAI reports the tier it actually used once done
    text = {"format": {"type": "text"}}
    if isinstance(body.get("text"), Mapping):
        text.update(body["text"])
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": bool(body.get("background", False)),
        "error": error,
        "incomplete_details": incomplete_details,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"),
        "model": model,
        "output": output or [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "prompt_cache_key": body.get("prompt_cache_key"),
        "reasoning": echo_reasoning,
        "safety_identifier": body.get("safety_identifier"),
        "service_tier": tier,
        "store": body.get("store", True),
        "temperature": _number(body.get("temperature"), 1.0),
        "text": text,
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": [_echo_tool(tool) for tool in body.get("tools") or []],
        "top_logprobs": body.get("top_logprobs") or 0,
        "top_p": _number(body.get("top_p"), 1.0),
        "truncation": body.get("truncation") or "disabled",
        "usage": usage,
        "user": body.get("user"),
        "metadata": body.get("metadata") or {},
    }


def _number(value: Any, default: float) -> float:
    return float(value) if isinstance(value, int | float) else default


def _echo_tool(tool: Any) -> Any:
    if not isinstance(tool, Mapping) or tool.get("type") != "function":
        return tool
    return {
        "type": "function",
        "description": tool.get("description"),
        "name": tool.get("name"),
        "parameters": tool.get("parameters"),
        "strict": tool.get("strict", True),
    }
