"""The script format: what the fake does for one ``POST /v1/responses`` (or
``POST /v1/chat/completions``) call.

Scripts are queued (``FakeUpstream.enqueue`` or ``POST /__fake/scripts``) and consumed one
per authenticated ``POST /v1/responses`` or ``POST /v1/chat/completions`` -- one queue for
both, in order; with the queue empty the *default reply* applies. A script is a JSON
object; every key is optional and unknown keys are an error::

    {
      "output": [                                   # what the model "generates", in order
        {"type": "reasoning", "summary": ["**Plan**", "..."]},   # "text": Chat's reasoning
        {"type": "message", "text": "Let me look.", "phase": "commentary"},
        {"type": "function_call", "name": "read", "arguments": "{}", "call_id": "call_x"},
        {"type": "custom_tool_call", "name": "ApplyPatch", "input": "*** Begin Patch...",
         "call_id": "call_y"},                      # a custom (freeform/grammar) tool call
        {"type": "refusal", "text": "I can't help with that."}
      ],
      "status": "completed",                        # | "incomplete" | "failed"
      "incomplete_reason": "max_output_tokens",     # | "content_filter" (status incomplete)
      "error": {"code": "server_error", "message": "..."},   # status failed (SDK codes only)
      "error_event": {"code": "server_error", "message": "...", "param": null,
                      "after_events": null},        # an `error` event instead of a terminal
      "http_error": {"status": 429, "type": "rate_limit_exceeded", "message": "...",
                     "code": null, "param": null, "headers": {"retry-after": "1"}},
      "delta_size": 1,          # characters per delta (text, refusal, arguments, summaries)
      "deltas": 300,            # or: this many deltas per text (at most its length)
      "ciphertext": "normal",   # | "differ" | "completed_only"
      "usage": {"input_tokens": 10, "cached_tokens": 4, "cache_write_tokens": 0,
                "output_tokens": 20, "reasoning_tokens": 16, "total_tokens": 30},
      "raw_sse": "event: ...",  # replay these bytes verbatim (or "raw_sse_file": a path
                                # under the fake's files_dir / --files-dir, see file_under)
      "validate": true,         # false: skip OpenAI's input validation for this call
      "strict": "tool_turns",   # Chat only: the reasoning_content rule for this call, or
                                # {"rule": ..., "prefix": true}; see fakeupstream.strict_chat
      "toxics": {...}           # network faults, see fakeupstream.toxics.Toxics
    }

Reasoning summaries are streamed only when the request asks for them
(``reasoning.summary``), and ``encrypted_content`` appears only when ``include`` has
``reasoning.encrypted_content`` -- as OpenAI does. ``ciphertext: differ`` gives a
reasoning item different (both valid) tokens in ``output_item.done`` and
``response.completed``; ``completed_only`` leaves it out of ``output_item.done``.
Without ``usage`` the counts are estimated, ``input_tokens`` and ``cached_tokens`` by the
fake's prompt cache (:mod:`fakeupstream.prompt_cache`); each ``usage`` key given wins.
``http_error`` wins over validation; ``raw_sse`` (always sent as SSE) still goes through
validation unless ``validate`` is false.
With ``stream`` false the same plan comes back as one JSON Response (``status: failed``
too, with HTTP 200); ``error_event`` becomes a 500 envelope; toxics treat that body as one
event.

On ``/v1/chat/completions`` (a strict thinking-mode provider, :mod:`fakeupstream.chat_reply`)
the same output becomes one assistant message: reasoning items give ``reasoning_content``
(``text``, else the summary), messages ``content``, refusals ``refusal``, function calls
``tool_calls``; ``status: incomplete`` is ``finish_reason: length`` (``content_filter``
for that reason); ``status: failed`` and ``error_event`` end with an error envelope (HTTP
500 as JSON, a ``data: {"error": ...}`` frame mid-stream); ``usage`` keys map onto Chat's
(``input_tokens`` -> ``prompt_tokens``, ``output_tokens`` -> ``completion_tokens``);
``strict`` picks the reasoning_content rule; ``validate: false`` skips it; ``ciphertext``
is ignored. Its default reply is in :mod:`fakeupstream.chat_fake`.

Default reply (empty queue), derived from the request:

- reasoning models get one reasoning item first (summary ``Thinking about: <last user text>``);
- if the request has function tools and the last input item is a user message containing
  ``CALL_TOOL``, the model calls the first function tool with ``{}``; a forced
  ``tool_choice`` (``required`` or ``{"type": "function", "name": ...}``) after a user
  message does the same (with the named tool);
- likewise ``CALL_CUSTOM`` (or ``tool_choice`` ``{"type": "custom", "name": ...}``, or
  ``required`` with only custom tools) makes it call the first (the named) custom tool
  with a freeform patch (:func:`custom_input`: not JSON, quotes, a backslash, a tab and a
  non-ASCII letter, so byte-for-byte relaying shows);
- otherwise one message: ``Echo: <last user text>`` (or ``Tool output: <output>`` after a
  function_call_output or custom_tool_call_output), a newline, and the continuity
  summary, e.g.
  ``continuity: replayed=2 intact=2 misplaced=0``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from fakeupstream.ciphertext import ContinuityReport, message_text
from fakeupstream.strict_chat import Strictness, parse_strictness
from fakeupstream.toxics import Toxics


class ScriptError(ValueError):
    """A script that cannot be run; the message says which key and what it accepts."""


@dataclass(frozen=True)
class Reasoning:
    summary: tuple[str, ...] = ()
    text: str | None = None  # Chat's reasoning_content text (the Responses path ignores it)


@dataclass(frozen=True)
class Message:
    text: str
    phase: str | None = None


@dataclass(frozen=True)
class Refusal:
    text: str


@dataclass(frozen=True)
class FunctionCall:
    name: str
    arguments: str
    call_id: str | None = None


@dataclass(frozen=True)
class CustomToolCall:
    """A call of a custom tool: ``input`` is freeform text (a patch, code), never JSON."""

    name: str
    input: str
    call_id: str | None = None


OutputSpec = Reasoning | Message | Refusal | FunctionCall | CustomToolCall


@dataclass(frozen=True)
class Failure:
    code: str
    message: str


@dataclass(frozen=True)
class ErrorEvent:
    message: str
    code: str | None = "server_error"
    param: str | None = None
    after_events: int | None = None  # None: in place of the terminal event


@dataclass(frozen=True)
class HttpError:
    status: int
    message: str
    type: str
    code: str | None = None
    param: str | None = None
    headers: tuple[tuple[str, str], ...] = ()


Status = Literal["completed", "incomplete", "failed"]


@dataclass(frozen=True)
class Script:
    output: tuple[OutputSpec, ...] | None = None  # None: the default reply
    status: Status = "completed"
    incomplete_reason: str = "max_output_tokens"
    error: Failure = Failure("server_error", "The model failed to generate a response.")
    error_event: ErrorEvent | None = None
    http_error: HttpError | None = None
    delta_size: int | None = None
    deltas: int | None = None
    ciphertext: Literal["normal", "differ", "completed_only"] = "normal"
    usage: Mapping[str, int] = field(default_factory=dict)
    raw_sse: bytes | None = None
    validate: bool = True
    toxics: Toxics = field(default_factory=Toxics)
    strict: Strictness | None = None  # None: the fake's own strictness


DEFAULT = Script()

# The error codes the SDK's ResponseError accepts (a failed response must validate).
FAILURE_CODES = (
    "server_error", "rate_limit_exceeded", "invalid_prompt", "data_residency_mismatch",
    "bio_policy", "misalignment_policy_violation", "vector_store_timeout",
    "invalid_image", "invalid_image_format", "invalid_base64_image", "invalid_image_url",
    "image_too_large", "image_too_small", "image_parse_error",
    "image_content_policy_violation", "invalid_image_mode", "image_file_too_large",
    "unsupported_image_media_type", "empty_image_file", "failed_to_download_image",
    "image_file_not_found",
)  # fmt: skip
USAGE_KEYS = (
    "input_tokens", "cached_tokens", "cache_write_tokens", "output_tokens", "reasoning_tokens",
    "total_tokens",
)  # fmt: skip
SCRIPT_KEYS = (
    "output", "status", "incomplete_reason", "error", "error_event", "http_error",
    "delta_size", "deltas", "ciphertext", "usage", "raw_sse", "raw_sse_file", "validate",
    "toxics", "strict",
)  # fmt: skip


def parse_script(raw: Mapping[str, Any], *, files_dir: Path | None = None) -> Script:
    """A validated :class:`Script`, or :class:`ScriptError` naming the offending key.

    ``files_dir``: the one directory ``raw_sse_file`` may name a file under (see
    :func:`file_under`); ``None`` refuses ``raw_sse_file``."""
    if not isinstance(raw, Mapping):
        raise ScriptError(f"a script must be a JSON object, got {type(raw).__name__}")
    _only(raw, SCRIPT_KEYS, "script")
    if "raw_sse" in raw and "raw_sse_file" in raw:
        raise ScriptError("give either 'raw_sse' or 'raw_sse_file', not both")
    if "delta_size" in raw and "deltas" in raw:
        raise ScriptError("give either 'delta_size' or 'deltas', not both")
    status = _choice(raw, "status", ("completed", "incomplete", "failed"), "completed")
    reason = _choice(
        raw, "incomplete_reason", ("max_output_tokens", "content_filter"), "max_output_tokens"
    )
    return Script(
        output=_output(raw["output"]) if "output" in raw else None,
        status=status,  # type: ignore[arg-type]  # checked by _choice
        incomplete_reason=reason,
        error=_failure(raw["error"]) if "error" in raw else DEFAULT.error,
        error_event=_error_event(raw["error_event"]) if "error_event" in raw else None,
        http_error=_http_error(raw["http_error"]) if "http_error" in raw else None,
        delta_size=_count(raw, "delta_size", minimum=1),
        deltas=_count(raw, "deltas", minimum=1),
        ciphertext=_choice(  # type: ignore[arg-type]  # checked by _choice
            raw, "ciphertext", ("normal", "differ", "completed_only"), "normal"
        ),
        usage=_usage(raw.get("usage", {})),
        raw_sse=_raw_sse(raw, files_dir),
        validate=_flag(raw, "validate", True),
        toxics=parse_toxics(raw.get("toxics", {})),
        strict=_strict(raw["strict"]) if "strict" in raw else None,
    )


def parse_scripts(raw: Any, *, files_dir: Path | None = None) -> list[Script]:
    """One script (an object) or several (a list), as ``POST /__fake/scripts`` accepts."""
    items = raw if isinstance(raw, list) else [raw]
    scripts = []
    for position, item in enumerate(items):
        try:
            scripts.append(parse_script(item, files_dir=files_dir))
        except ScriptError as error:
            raise ScriptError(f"script {position}: {error}") from None
    return scripts


def parse_toxics(raw: Any) -> Toxics:
    if not isinstance(raw, Mapping):
        raise ScriptError("'toxics' must be an object")
    names = tuple(f.name for f in fields(Toxics))
    _only(raw, names, "toxics")
    values: dict[str, Any] = {}
    for name in names:
        if name not in raw:
            continue
        if name in ("slice_random", "omit_final_blank_line"):
            values[name] = _flag(raw, name, False)
        elif name == "cut_mode":
            values[name] = _choice(raw, name, ("finish", "close"), "finish")
        elif name == "latency_ms":
            value = raw[name]
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ScriptError("'toxics.latency_ms' must be a number >= 0")
            values[name] = float(value)
        elif name == "latency_after_events":
            values[name] = _count(raw, name, minimum=0, where="toxics.") or 0
        else:
            minimum = 1 if name in ("slice_bytes", "oversized_event_bytes") else 0
            values[name] = _count(raw, name, minimum=minimum, where="toxics.")
    return Toxics(**values)


# --- pieces --------------------------------------------------------------------------


def _only(raw: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise ScriptError(
            f"unknown {where} key(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(allowed)}"
        )


def _choice(raw: Mapping[str, Any], key: str, allowed: Sequence[str], default: str) -> str:
    value = raw.get(key, default)
    if value not in allowed:
        raise ScriptError(f"{key!r} must be one of {', '.join(allowed)}; got {value!r}")
    return str(value)


def _count(raw: Mapping[str, Any], key: str, *, minimum: int, where: str = "") -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ScriptError(f"'{where}{key}' must be an integer >= {minimum}; got {value!r}")
    return value


def _flag(raw: Mapping[str, Any], key: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise ScriptError(f"{key!r} must be true or false; got {value!r}")
    return value


def _text(raw: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> str | None:
    value = raw.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise ScriptError(f"{where}: {key!r} must be a string; got {value!r}")
    return value


def _output(raw: Any) -> tuple[OutputSpec, ...]:
    if not isinstance(raw, list):
        raise ScriptError("'output' must be a list of items")
    items: list[OutputSpec] = []
    for position, item in enumerate(raw):
        where = f"output[{position}]"
        if not isinstance(item, Mapping):
            raise ScriptError(f"{where} must be an object with a 'type'")
        kind = item.get("type")
        if kind == "reasoning":
            _only(item, ("type", "summary", "text"), where)
            summary = item.get("summary", [])
            if not isinstance(summary, list) or not all(isinstance(s, str) for s in summary):
                raise ScriptError(f"{where}: 'summary' must be a list of strings")
            text = _text(item, "text", where, required=False)
            items.append(Reasoning(tuple(summary), text))
        elif kind == "message":
            _only(item, ("type", "text", "phase"), where)
            phase = _text(item, "phase", where, required=False)
            if phase not in (None, "commentary", "final_answer"):
                raise ScriptError(f"{where}: 'phase' must be commentary or final_answer")
            items.append(Message(str(_text(item, "text", where)), phase))
        elif kind == "refusal":
            _only(item, ("type", "text"), where)
            items.append(Refusal(str(_text(item, "text", where))))
        elif kind == "function_call":
            _only(item, ("type", "name", "arguments", "call_id"), where)
            arguments = item.get("arguments", "{}")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments)  # an object is taken as its JSON text
            call_id = _text(item, "call_id", where, required=False)
            items.append(FunctionCall(str(_text(item, "name", where)), arguments, call_id))
        elif kind == "custom_tool_call":
            _only(item, ("type", "name", "input", "call_id"), where)
            call_id = _text(item, "call_id", where, required=False)
            name, text = str(_text(item, "name", where)), str(_text(item, "input", where))
            items.append(CustomToolCall(name, text, call_id))
        else:
            raise ScriptError(
                f"{where}: 'type' must be reasoning, message, function_call, custom_tool_call "
                f"or refusal; got {kind!r}"
            )
    return tuple(items)


def _strict(raw: Any) -> Strictness:
    try:
        return parse_strictness(raw)
    except ValueError as error:
        raise ScriptError(str(error)) from None


def _failure(raw: Any) -> Failure:
    if not isinstance(raw, Mapping):
        raise ScriptError("'error' must be an object with 'code' and 'message'")
    _only(raw, ("code", "message"), "error")
    code = raw.get("code", "server_error")
    if code not in FAILURE_CODES:
        raise ScriptError(
            f"'error.code' must be a code the SDK accepts ({', '.join(FAILURE_CODES)})"
        )
    return Failure(code, str(_text(raw, "message", "error")))


def _error_event(raw: Any) -> ErrorEvent:
    if not isinstance(raw, Mapping):
        raise ScriptError("'error_event' must be an object with at least 'message'")
    _only(raw, ("code", "message", "param", "after_events"), "error_event")
    return ErrorEvent(
        message=str(_text(raw, "message", "error_event")),
        code=_text(raw, "code", "error_event", required=False) if "code" in raw else "server_error",
        param=_text(raw, "param", "error_event", required=False),
        after_events=_count(raw, "after_events", minimum=0, where="error_event."),
    )


def _http_error(raw: Any) -> HttpError:
    if not isinstance(raw, Mapping):
        raise ScriptError("'http_error' must be an object with 'status' and 'message'")
    _only(raw, ("status", "type", "message", "code", "param", "headers"), "http_error")
    status = raw.get("status")
    if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
        raise ScriptError(f"'http_error.status' must be an integer 400..599; got {status!r}")
    headers = raw.get("headers", {})
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise ScriptError("'http_error.headers' must map header names to strings")
    default_type = "server_error" if status >= 500 else "invalid_request_error"
    return HttpError(
        status=status,
        message=str(_text(raw, "message", "http_error")),
        type=str(_text(raw, "type", "http_error", required=False) or default_type),
        code=_text(raw, "code", "http_error", required=False),
        param=_text(raw, "param", "http_error", required=False),
        headers=tuple(headers.items()),
    )


def _usage(raw: Any) -> dict[str, int]:
    if not isinstance(raw, Mapping):
        raise ScriptError("'usage' must be an object")
    _only(raw, USAGE_KEYS, "usage")
    return {key: int(_count(raw, key, minimum=0, where="usage.") or 0) for key in raw}


def _raw_sse(raw: Mapping[str, Any], files_dir: Path | None) -> bytes | None:
    if "raw_sse" in raw:
        if not isinstance(raw["raw_sse"], str):
            raise ScriptError("'raw_sse' must be a string of SSE text")
        return raw["raw_sse"].encode()
    if "raw_sse_file" in raw:
        path = raw["raw_sse_file"]
        if not isinstance(path, str):
            raise ScriptError("'raw_sse_file' must be a path (a string)")
        try:
            return file_under(files_dir, path, "raw_sse_file").read_bytes()
        except OSError as error:
            raise ScriptError(f"'raw_sse_file' {path!r} cannot be read: {error}") from None
    return None


def file_under(files_dir: Path | None, path: str, key: str) -> Path:
    """``path`` (relative to ``files_dir``, or absolute) once it is known to name a file
    under ``files_dir`` after every symlink is followed; :class:`ScriptError` otherwise.

    The fake's controls are unauthenticated HTTP: a control that reads a file must not
    become a way to read any file its process can (the relay's store, a key). So a fake
    reads only under the directory its harness named (``files_dir``, ``--files-dir``), and
    one started without it reads no file at all."""
    if files_dir is None:
        raise ScriptError(
            f"{key!r}: this fake reads no files; start it with files_dir (--files-dir DIR) "
            "and name a file under that directory"
        )
    root = files_dir.resolve()
    target = (root / path).resolve()  # an absolute ``path`` replaces ``root`` here
    if not target.is_relative_to(root):
        raise ScriptError(f"{key!r} {path!r} is not under the fake's files directory {root}")
    return target


# --- the default reply ---------------------------------------------------------------


def default_output(
    body: Mapping[str, Any], items: Sequence[Any], report: ContinuityReport, *, reasoning: bool
) -> tuple[OutputSpec, ...]:
    """What the fake model says when no script is queued (see the module docstring)."""
    last = items[-1] if items and isinstance(items[-1], Mapping) else {}
    user_text = next(
        (
            message_text(item)
            for item in reversed(items)
            if isinstance(item, Mapping) and item.get("role") == "user"
        ),
        "",
    )
    output: list[OutputSpec] = []
    if reasoning:
        output.append(Reasoning((f"Thinking about: {_clip(user_text)}",)))
    call = _call_to_make(body, last)
    if call is not None:
        output.append(call)
        return tuple(output)
    if last.get("type") in ("function_call_output", "custom_tool_call_output"):
        said = last.get("output")
        heard = f"Tool output: {_clip(said if isinstance(said, str) else json.dumps(said))}"
    else:
        heard = f"Echo: {_clip(user_text)}"
    output.append(Message(f"{heard}\n{report.summary()}"))
    return tuple(output)


def _call_to_make(
    body: Mapping[str, Any], last: Mapping[str, Any]
) -> FunctionCall | CustomToolCall | None:
    tools = [t for t in body.get("tools") or [] if isinstance(t, Mapping)]
    names = [str(t.get("name")) for t in tools if t.get("type") == "function"]
    customs = [str(t.get("name")) for t in tools if t.get("type") == "custom"]
    if not (names or customs) or last.get("role") != "user":
        return None
    text = message_text(last)
    choice = body.get("tool_choice")
    if isinstance(choice, Mapping) and choice.get("type") == "custom":
        return CustomToolCall(str(choice.get("name")), custom_input(text))
    if "CALL_CUSTOM" in text and customs:
        return CustomToolCall(customs[0], custom_input(text))
    if not names:
        return CustomToolCall(customs[0], custom_input(text)) if choice == "required" else None
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        return FunctionCall(str(choice.get("name")), "{}")
    if choice == "required" or "CALL_TOOL" in text:
        return FunctionCall(names[0], "{}")
    return None


def custom_input(user_text: str) -> str:
    """The default custom call's input: a patch adding the user's (clipped) text."""
    return (
        '*** Begin Patch\n*** Update File: caf\u00e9/notes.txt\n@@ "quoted" \\ tab\there\n'
        f"+{_clip(user_text, 80)}\n*** End Patch\n"
    )


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
