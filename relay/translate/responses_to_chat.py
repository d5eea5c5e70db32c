"""Final Responses JSON → ``chat.completion`` (pure; no I/O).

Also home of the pieces the stream converter shares with it: the finish-reason rule, the
usage mapping, the readers of output items, and the sanitized ``UpstreamFailed`` builder.

- Every ``message`` item lands in the one choice, texts concatenated in output order with
  no separator (exactly what the streamed deltas add up to); refusal parts likewise go to
  ``message.refusal``.
- ``function_call`` items become ``tool_calls``, and so do ``custom_tool_call`` items, in
  the form asked for (:data:`~relay.settings.custom_calls.CustomCallForm`): a function-type
  call whose ``arguments`` is the raw ``input``, or the Chat API's ``{"type": "custom",
  "custom": {"name", "input"}}``; the input is freeform text, passed on byte for byte and
  never read as JSON. Other item types (reasoning, built-in tools) have no Chat form and
  are left out, except reasoning summaries, which become ``reasoning_content`` (parts
  joined by a blank line) when summaries are enabled.
- A response that did not complete never becomes an empty success: ``incomplete`` maps to
  ``length``/``content_filter`` and anything else raises :class:`UpstreamFailed`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from relay.errors import UpstreamFailed, UpstreamProtocolError
from relay.settings.custom_calls import CustomCallForm
from relay.translate.events import (
    ChatCompletion,
    ChatMessage,
    ChatUsage,
    FinishReason,
    FunctionCall,
    PromptTokensDetails,
    ToolCall,
)

INCOMPLETE_FINISH_REASONS: dict[str, FinishReason] = {
    "max_output_tokens": "length",
    "content_filter": "content_filter",
}
# A message content part's kind: text, a refusal, or "" for a type Chat cannot carry.
PartKind = Literal["content", "refusal", ""]
SUMMARY_SEPARATOR = "\n\n"

# Upstream error texts may quote a prefix of encrypted reasoning; such runs are cut out
# before a message reaches a client or a log. Item ids (rs_..., call_...) are kept.
_OPAQUE_RUN = re.compile(r"[A-Za-z0-9+/=_-]{24,}")
_ITEM_ID = re.compile(r"(?:rs|fc|msg|call|resp|ws|fs|ci|ctc|mcp|ig)_[A-Za-z0-9]+")
_SAFE_CODE = re.compile(r"[a-z0-9_]{1,64}")
MAX_ERROR_MESSAGE_CHARS = 1000


def sanitize_upstream_text(text: str) -> str:
    def scrub(match: re.Match[str]) -> str:
        token = match.group(0)
        if _ITEM_ID.fullmatch(token) and not token.startswith("gAAAA"):
            return token
        # snake_case words (error codes) are text; encoded bytes mix digits or cases
        mixed_case = any(c.isupper() for c in token) and any(c.islower() for c in token)
        looks_encoded = mixed_case or any(c.isdigit() for c in token)
        return "<redacted>" if looks_encoded else token

    cleaned = _OPAQUE_RUN.sub(scrub, text)
    if len(cleaned) > MAX_ERROR_MESSAGE_CHARS:
        cleaned = cleaned[:MAX_ERROR_MESSAGE_CHARS] + "..."
    return cleaned


def upstream_failure(error: Any, fallback: str) -> UpstreamFailed:
    """An :class:`UpstreamFailed` from an upstream error object (``{code, message}``)."""
    message = error.get("message") if isinstance(error, Mapping) else None
    code = error.get("code") if isinstance(error, Mapping) else None
    text = sanitize_upstream_text(message) if isinstance(message, str) and message else fallback
    safe_code = code if isinstance(code, str) and _SAFE_CODE.fullmatch(code) else None
    return UpstreamFailed(f"upstream generation failed: {text}", code=safe_code)


def finish_reason_for(response: Mapping[str, Any], *, has_tool_calls: bool) -> FinishReason:
    """The Chat ``finish_reason`` of a final response; raises when it did not finish."""
    status = response.get("status")
    if status == "completed":
        return "tool_calls" if has_tool_calls else "stop"
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, Mapping) else None
        if reason in INCOMPLETE_FINISH_REASONS:
            return INCOMPLETE_FINISH_REASONS[reason]
        raise UpstreamFailed(
            f"upstream response ended incomplete (reason: {_short(reason)}); nothing to relay"
        )
    if status == "failed":
        raise upstream_failure(response.get("error"), "upstream response failed")
    if not isinstance(status, str):
        raise UpstreamProtocolError("upstream response has no 'status'")
    raise UpstreamFailed(f"upstream response ended with status {_short(status)}")


def _short(value: Any) -> str:
    return sanitize_upstream_text(str(value))[:64]


def usage_to_chat(usage: Mapping[str, Any] | None) -> ChatUsage | None:
    """Responses ``usage`` → Chat ``usage``; ``None`` when the upstream sent none."""
    if usage is None:
        return None
    if not isinstance(usage, Mapping):
        raise UpstreamProtocolError("upstream 'usage' is not an object")
    prompt = _count(usage, "input_tokens")
    completion = _count(usage, "output_tokens")
    total = usage.get("total_tokens")
    total = _count(usage, "total_tokens") if total is not None else prompt + completion
    prompt_details: PromptTokensDetails = {
        "cached_tokens": _detail(usage, "input_tokens_details", "cached_tokens") or 0
    }
    cache_write = _detail(usage, "input_tokens_details", "cache_write_tokens")
    if cache_write is not None:
        prompt_details["cache_write_tokens"] = cache_write
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": total,
        "prompt_tokens_details": prompt_details,
        "completion_tokens_details": {
            "reasoning_tokens": _detail(usage, "output_tokens_details", "reasoning_tokens") or 0
        },
    }


def _count(usage: Mapping[str, Any], key: str) -> int:
    value = usage.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UpstreamProtocolError(f"upstream usage.{key} is not a token count")
    return value


def _detail(usage: Mapping[str, Any], group: str, key: str) -> int | None:
    details = usage.get(group)
    if not isinstance(details, Mapping) or details.get(key) is None:
        return None
    return _count(details, key)


# --- output item readers (shared with the stream converter) --------------------------


def item_type(item: Any) -> str:
    if not isinstance(item, Mapping) or not isinstance(item.get("type"), str):
        raise UpstreamProtocolError("upstream output item is not an object with a 'type'")
    return str(item["type"])


def message_parts(item: Mapping[str, Any]) -> list[tuple[PartKind, str]]:
    """``(kind, text)`` per content part of a message item; kind is ``content`` or
    ``refusal``. Unknown part types give ``("", "")`` so positions stay aligned."""
    content = item.get("content")
    if not isinstance(content, list):
        raise UpstreamProtocolError("upstream message item has no 'content' list")
    parts: list[tuple[PartKind, str]] = []
    for part in content:
        kind = item_type(part)
        field = {"output_text": "text", "refusal": "refusal"}.get(kind)
        if field is None:
            parts.append(("", ""))
            continue
        text = part.get(field)
        if not isinstance(text, str):
            raise UpstreamProtocolError(f"upstream {kind} part has no string '{field}'")
        parts.append(("content" if kind == "output_text" else "refusal", text))
    return parts


def function_call_fields(item: Mapping[str, Any], *, need_arguments: bool = True) -> FunctionCall:
    """``call_id``, ``name`` and ``arguments`` of a function_call item, or of a
    custom_tool_call item with its ``input`` as ``arguments`` (they may be missing from an
    ``output_item.added`` item: then ``""``)."""
    kind = item.get("type")
    field = "input" if kind == "custom_tool_call" else "arguments"
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get(field)
    if arguments is None and not need_arguments:
        arguments = ""
    if not isinstance(call_id, str):
        raise _not_a_string(kind, "call_id")
    if not isinstance(name, str):
        raise _not_a_string(kind, "name")
    if not isinstance(arguments, str):
        raise _not_a_string(kind, field)
    return {"call_id": call_id, "name": name, "arguments": arguments}


def _not_a_string(kind: object, key: str) -> UpstreamProtocolError:
    return UpstreamProtocolError(f"upstream {kind} item has no string '{key}'")


def chat_tool_call(call: FunctionCall, *, custom: bool, form: CustomCallForm) -> ToolCall:
    """A message's tool call: a function call, or a custom one in ``form``."""
    if custom and form == "custom":
        return {
            "id": call["call_id"],
            "type": "custom",
            "custom": {"name": call["name"], "input": call["arguments"]},
        }
    return {
        "id": call["call_id"],
        "type": "function",
        "function": {"name": call["name"], "arguments": call["arguments"]},
    }


def summary_texts(item: Mapping[str, Any]) -> list[str]:
    summary = item.get("summary")
    if summary is None:
        return []
    if not isinstance(summary, list):
        raise UpstreamProtocolError("upstream reasoning item 'summary' is not a list")
    texts = []
    for part in summary:
        if item_type(part) == "summary_text":
            text = part.get("text")
            if not isinstance(text, str):
                raise UpstreamProtocolError("upstream summary_text part has no string 'text'")
            texts.append(text)
    return texts


def output_items(response: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    output = response.get("output")
    if not isinstance(output, list):
        raise UpstreamProtocolError("upstream response has no 'output' list")
    for item in output:
        item_type(item)
    return output


# --- the non-streaming answer --------------------------------------------------------


def response_to_chat_completion(
    response: Mapping[str, Any],
    *,
    completion_id: str,
    created: int,
    model: str,
    reasoning_summaries: bool,
    custom_tool_calls: CustomCallForm = "function",
) -> ChatCompletion:
    if not isinstance(response, Mapping):
        raise UpstreamProtocolError("upstream response is not a JSON object")
    # The status decides first: a failed response's output is not worth reading.
    finish_reason_for(response, has_tool_calls=False)
    texts: list[str] = []
    refusals: list[str] = []
    summaries: list[str] = []
    tool_calls: list[ToolCall] = []
    for item in output_items(response):
        kind = item_type(item)
        if kind == "message":
            for part_kind, text in message_parts(item):
                if part_kind == "content":
                    texts.append(text)
                elif part_kind == "refusal":
                    refusals.append(text)
        elif kind in ("function_call", "custom_tool_call"):
            custom = kind == "custom_tool_call"
            call = chat_tool_call(function_call_fields(item), custom=custom, form=custom_tool_calls)
            tool_calls.append(call)
        elif kind == "reasoning":
            summaries.extend(summary_texts(item))
    text, refusal = "".join(texts), "".join(refusals)
    message: ChatMessage = {
        "role": "assistant",
        # No text: null beside a refusal or tool calls (as OpenAI does), else "".
        "content": text if text or not (refusal or tool_calls) else None,
        "refusal": refusal or None,
    }
    if tool_calls:
        message["tool_calls"] = tool_calls
    if reasoning_summaries and summaries:
        message["reasoning_content"] = SUMMARY_SEPARATOR.join(summaries)
    completion: ChatCompletion = {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason_for(response, has_tool_calls=bool(tool_calls)),
                "logprobs": None,
            }
        ],
    }
    usage = usage_to_chat(response.get("usage"))
    if usage is not None:
        completion["usage"] = usage
    return completion


def project_output(output: list[dict[str, Any]]) -> ChatCompletion:
    """The JSON answer a completed response's items make, with custom tool calls in the
    custom form (which keeps their kind): what the capture checks the client's answer
    against (:class:`relay.core.capture.OutputCapture` gets it injected, the core importing
    no translation). Raises :class:`RelayError` when the items make no answer."""
    return response_to_chat_completion(
        {"status": "completed", "output": output},
        completion_id="",
        created=0,
        model="",
        reasoning_summaries=False,
        custom_tool_calls="custom",
    )
