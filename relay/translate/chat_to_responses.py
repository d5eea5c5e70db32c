"""Chat Completions request body → Responses request body (pure; no I/O).

Decisions (the issue left these open):

- Leading ``system``/``developer`` messages become ``instructions``, joined with a blank
  line (``"\\n\\n"``). A system/developer message after the first non-system message stays
  in place as an input message with its own role.
- Text parts of one message are concatenated with no separator (Chat treats a list of text
  parts as one text), so a string and its split-into-parts form translate identically.
- User content always becomes a list of ``input_text``/``input_image`` parts, also for a
  plain string. An ``image_url`` part without ``detail`` gets ``"auto"``, Chat's default
  (the Responses type requires the field).
- An assistant message becomes one ``message`` item (one ``output_text`` part, then its
  refusals) followed by one ``function_call`` item per tool call; the message item is
  left out when it has neither text nor refusal. Tool-call ``arguments`` are forwarded as
  the exact string received.
- Custom tools (``{"type": "custom", "custom": {name, description?, format?}}``) become
  Responses custom tools (``{"type": "custom", name, description?, format?}``, a grammar
  format flattened to ``{"type": "grammar", syntax, definition}``); ``tool_choice``
  ``{"type": "custom", "custom": {"name"}}`` becomes ``{"type": "custom", "name"}``. An
  assistant tool call of ``type: "custom"`` becomes a ``custom_tool_call`` item (its
  ``input`` as sent) and the ``tool`` message answering it a ``custom_tool_call_output``:
  an output always answers a call of its own kind upstream. A tool message answering no
  earlier call is refused (400, naming the message) before anything is sent.
- Function tools get ``strict: false`` when the client did not say: Chat defaults to
  non-strict, the Responses API to strict, and strict mode rejects most client schemas.
  A tool without ``parameters`` gets an empty object schema (Chat: "no parameters").
- ``tool_choice`` ``"auto"``/``"none"`` is left out when there are no tools (it means
  nothing then, and Cursor sends ``tools: null`` with ``tool_choice: "auto"``).
- ``response_format: {type: text}`` is left out (text is the upstream default).
- ``reasoning_effort`` wins over Cursor's non-standard ``reasoning.effort`` when both are
  given and differ: it is the documented Chat field. Alias values fill in what the client
  left out; a reasoning summary is requested by default (``"auto"``) only when summaries
  are streamed to the client and the model is a reasoning model (others reject it).
  Summary ``"none"`` means "do not request one".
- ``user`` is forwarded as ``user``: the Responses API still accepts it (deprecated), while
  ``safety_identifier`` has a 64-character limit a Chat ``user`` value need not respect.
  The same value is returned as ``TranslatedRequest.caller``.
- A ``null`` value means "not given" for every optional parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from relay.errors import InvalidRequest, UnsupportedParameter
from relay.settings.custom_calls import CustomCallForm
from relay.settings.model_alias import ModelAlias
from relay.translate.sampling import is_reasoning_model, sampling_params


@dataclass(frozen=True)
class TranslatedRequest:
    """A translated request. ``upstream_body`` and its ``input`` list are new objects; other
    values (schemas, metadata, ...) may be shared with the client body: treat them as
    read-only."""

    upstream_body: dict[str, Any]  # Responses body without "stream" (the server adds it)
    stream: bool  # the client asked for SSE
    include_usage: bool  # stream_options.include_usage
    client_model: str  # echoed in answers
    caller: str | None  # the client's `user` value; partitions the cache
    shape: str  # "chat" or "responses"
    # Chat shape: for each client message, the [start, end) range of upstream ``input``
    # items it became (None: merged into ``instructions``). Replay swaps these ranges.
    message_spans: tuple[tuple[int, int] | None, ...] | None = None
    # How a custom tool call reaches the client: the Chat shape always gets the Chat API's
    # own form; the Responses shape gets RELAY_CUSTOM_TOOL_CALLS (see relay.settings.config).
    custom_tool_calls: CustomCallForm = "custom"


def _is_zero(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and value == 0


def _is_one(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value == 1


# Chat parameters with no Responses equivalent: accepted only at their neutral value
# (null always counts as neutral). Each entry says what the client should do instead.
NEUTRAL_ONLY: dict[str, tuple[Callable[[Any], bool], str]] = {
    "n": (_is_one, "the relay returns a single choice; send n=1 or leave it out"),
    "stop": (lambda v: v == [], "stop sequences have no Responses equivalent; remove 'stop'"),
    "logit_bias": (lambda v: v == {}, "the Responses API has no logit bias; remove it"),
    "logprobs": (lambda v: v is False, "log probabilities are not relayed; remove 'logprobs'"),
    "top_logprobs": (_is_zero, "log probabilities are not relayed; remove 'top_logprobs'"),
    "presence_penalty": (_is_zero, "the Responses API has no presence penalty; remove it"),
    "frequency_penalty": (_is_zero, "the Responses API has no frequency penalty; remove it"),
    "seed": (lambda v: False, "the Responses API has no seed; remove 'seed'"),
    "functions": (lambda v: v == [], "legacy 'functions' are not supported; send 'tools'"),
    "function_call": (lambda v: False, "legacy 'function_call' is unsupported; send 'tool_choice'"),
    "audio": (lambda v: False, "audio output is not relayed; remove 'audio'"),
    "modalities": (lambda v: v == ["text"], "only text output is relayed; send ['text'] or omit"),
    "prediction": (lambda v: False, "predicted outputs have no Responses equivalent; remove it"),
    "web_search_options": (lambda v: False, "web search is not relayed; remove the options"),
}

# What RELAY_DROP_UNSUPPORTED_PARAMS=1 drops instead of refusing: output and sampling
# controls a generic client sends by habit. Dropping one changes details of the answer,
# never what the model is given (legacy functions, audio, web search stay refused).
DROPPABLE = frozenset({"n", "stop", "seed", "prediction", "logit_bias", "presence_penalty",
                       "frequency_penalty", "logprobs", "top_logprobs"})  # fmt: skip
DROP_HINT = " (or start the relay with RELAY_DROP_UNSUPPORTED_PARAMS=1 to drop it)"


def droppable_in(body: Mapping[str, Any]) -> tuple[str, ...]:
    """The parameters of ``body`` the relay would refuse and may drop (sorted)."""
    return tuple(
        sorted(
            key
            for key in DROPPABLE
            if body.get(key) is not None and not NEUTRAL_ONLY[key][0](body[key])
        )
    )


# Forwarded unchanged when given: key → (type check, what the client must send).
PASSTHROUGH: dict[str, tuple[Callable[[Any], bool], str]] = {
    "parallel_tool_calls": (lambda v: isinstance(v, bool), "true or false"),
    "store": (lambda v: isinstance(v, bool), "true or false"),
    "user": (lambda v: isinstance(v, str), "a string"),
    "safety_identifier": (lambda v: isinstance(v, str), "a string"),
    "prompt_cache_key": (lambda v: isinstance(v, str), "a string"),
    "prompt_cache_retention": (lambda v: isinstance(v, str), "a string"),
    "service_tier": (lambda v: isinstance(v, str), "a string"),
    # a Responses field, accepted on the Chat path too (clients that speak both send it)
    "truncation": (lambda v: isinstance(v, str), "a string ('auto' or 'disabled')"),
    "metadata": (
        lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
        "an object with string values",
    ),
    "include": (
        lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        "an array of strings",
    ),
}

# Keys translated by dedicated code below (or consumed by the relay itself).
TRANSLATED = frozenset(
    {
        "model", "messages", "stream", "stream_options", "tools", "tool_choice",
        "response_format", "verbosity", "max_tokens", "max_completion_tokens",
        "reasoning_effort", "reasoning", "temperature", "top_p",
    }
)  # fmt: skip

EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
IMAGE_DETAILS = ("low", "high", "auto")


def translate_chat(
    body: Mapping[str, Any], target: ModelAlias, *, reasoning_summaries: bool
) -> TranslatedRequest:
    for key, value in body.items():
        _check_known_key(key, value)
    client_model = client_model_name(body)
    stream, include_usage = stream_flags(body)
    instructions, items, spans = _translate_messages(body["messages"])

    out: dict[str, Any] = {"model": target.model}
    if instructions is not None:
        out["instructions"] = instructions
    out["input"] = items
    tools = _translate_tools(body.get("tools"))
    if tools:
        out["tools"] = tools
    tool_choice = _translate_tool_choice(body.get("tool_choice"))
    if tool_choice is not None and (tools or tool_choice not in ("auto", "none")):
        out["tool_choice"] = tool_choice
    text = _translate_text(body.get("response_format"), body.get("verbosity"))
    if text:
        out["text"] = text
    effort = optional_str(body, "reasoning_effort")
    summary = context = None
    reasoning = body.get("reasoning")
    if reasoning is not None:
        cursor_effort, summary, context = parse_reasoning_object(reasoning, "reasoning")
        effort = effort if effort is not None else cursor_effort
    settings = reasoning_settings(
        effort, summary, target, context=context, reasoning_summaries=reasoning_summaries
    )
    if settings:
        out["reasoning"] = settings
    max_output = _max_output_tokens(body)
    if max_output is not None:
        out["max_output_tokens"] = max_output
    out.update(sampling_params(body, target.model, target.sampling))
    for key in PASSTHROUGH:
        if body.get(key) is not None:
            out[key] = body[key]
    user = body.get("user")
    return TranslatedRequest(
        out, stream, include_usage, client_model, user, "chat", spans, custom_tool_calls="custom"
    )


# --- shared with responses_input ----------------------------------------------------


def client_model_name(body: Mapping[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise InvalidRequest("'model' is required and must be a non-empty string", param="model")
    return model


def stream_flags(body: Mapping[str, Any]) -> tuple[bool, bool]:
    """(stream, include_usage) from ``stream`` and ``stream_options``."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise InvalidRequest("'stream' must be true or false", param="stream")
    options = body.get("stream_options")
    if options is None:
        return bool(stream), False
    if not isinstance(options, dict):
        raise InvalidRequest("'stream_options' must be an object", param="stream_options")
    include_usage = options.get("include_usage")
    if include_usage is not None and not isinstance(include_usage, bool):
        raise InvalidRequest(
            "'stream_options.include_usage' must be true or false",
            param="stream_options.include_usage",
        )
    return bool(stream), bool(include_usage)


def reasoning_settings(
    effort: str | None,
    summary: str | None,
    target: ModelAlias,
    *,
    context: str | None = None,
    reasoning_summaries: bool,
) -> dict[str, str] | None:
    """The upstream ``reasoning`` object: client values, else alias defaults (see docstring)."""
    if effort is None:
        effort = target.reasoning_effort
    if summary is None:
        summary = target.reasoning_summary
    if context is None:
        context = target.reasoning_context
    if summary is None and reasoning_summaries and is_reasoning_model(target.model):
        summary = "auto"
    settings: dict[str, str] = {}
    if effort is not None:
        settings["effort"] = effort
    if summary is not None and summary != "none":
        settings["summary"] = summary
    if context is not None:
        settings["context"] = context
    return settings or None


def optional_str(body: Mapping[str, Any], key: str, where: str | None = None) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise InvalidRequest(f"'{where or key}' must be a string", param=where or key)
    return value


def parse_reasoning_object(reasoning: Any, where: str) -> tuple[str | None, str | None, str | None]:
    """(effort, summary, context) from a ``reasoning`` object; other keys are refused, not
    dropped. ``context`` (GPT-5.6 and later) passes through; the upstream judges its value."""
    if not isinstance(reasoning, dict):
        raise InvalidRequest(
            f"'{where}' must be an object with 'effort'/'summary'/'context'", param=where
        )
    for key in reasoning:
        if key not in ("effort", "summary", "context"):
            raise UnsupportedParameter(
                f"'{where}.{key}' is not supported; 'reasoning' accepts 'effort', 'summary' "
                "and 'context'",
                param=f"{where}.{key}",
            )
    effort = optional_str(reasoning, "effort", f"{where}.effort")
    summary = optional_str(reasoning, "summary", f"{where}.summary")
    context = optional_str(reasoning, "context", f"{where}.context")
    return effort, summary, context


# --- top-level parameters ----------------------------------------------------------


def _check_known_key(key: str, value: Any) -> None:
    if key in TRANSLATED:
        return
    if key in PASSTHROUGH:
        check, expected = PASSTHROUGH[key]
        if value is not None and not check(value):
            raise InvalidRequest(f"'{key}' must be {expected}", param=key)
        return
    if key in NEUTRAL_ONLY:
        neutral, advice = NEUTRAL_ONLY[key]
        if value is not None and not neutral(value):
            hint = DROP_HINT if key in DROPPABLE else ""
            raise UnsupportedParameter(f"'{key}' is not supported: {advice}{hint}", param=key)
        return
    raise UnsupportedParameter(
        f"unknown parameter '{key}': the relay forwards only Chat Completions parameters it "
        "can map to the Responses API; remove it",
        param=key,
    )


def _max_output_tokens(body: Mapping[str, Any]) -> int | None:
    found: dict[str, int] = {}
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidRequest(f"'{key}' must be a positive integer", param=key)
        found[key] = value
    if len(set(found.values())) > 1:
        raise InvalidRequest(
            "'max_tokens' and 'max_completion_tokens' differ; send only 'max_completion_tokens'",
            param="max_tokens",
        )
    return next(iter(found.values()), None)


def _translate_text(response_format: Any, verbosity: Any) -> dict[str, Any]:
    text: dict[str, Any] = {}
    if verbosity is not None:
        if not isinstance(verbosity, str):
            raise InvalidRequest("'verbosity' must be a string", param="verbosity")
        text["verbosity"] = verbosity
    if response_format is None:
        return text
    where = "response_format"
    if not isinstance(response_format, dict):
        raise InvalidRequest(f"'{where}' must be an object", param=where)
    kind = response_format.get("type")
    if kind == "text":
        return text
    if kind == "json_object":
        text["format"] = {"type": "json_object"}
        return text
    if kind != "json_schema":
        raise InvalidRequest(
            f"'{where}.type' must be 'text', 'json_object' or 'json_schema'", param=f"{where}.type"
        )
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict):
        raise InvalidRequest(
            f"'{where}.json_schema' must be an object", param=f"{where}.json_schema"
        )
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest(
            f"'{where}.json_schema.name' must be a non-empty string",
            param=f"{where}.json_schema.name",
        )
    schema = spec.get("schema")
    if not isinstance(schema, dict):
        raise InvalidRequest(
            f"'{where}.json_schema.schema' must be a JSON schema object",
            param=f"{where}.json_schema.schema",
        )
    fmt: dict[str, Any] = {"type": "json_schema", "name": name, "schema": schema}
    if spec.get("description") is not None:
        fmt["description"] = optional_str(spec, "description", f"{where}.json_schema.description")
    strict = spec.get("strict")
    if strict is not None:
        if not isinstance(strict, bool):
            raise InvalidRequest(
                f"'{where}.json_schema.strict' must be true or false",
                param=f"{where}.json_schema.strict",
            )
        fmt["strict"] = strict
    text["format"] = fmt
    return text


# --- tools ---------------------------------------------------------------------------


def _translate_tools(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise InvalidRequest("'tools' must be an array of function or custom tools", param="tools")
    out = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise InvalidRequest(f"'{where}' must be an object", param=where)
        if tool.get("type") == "custom":
            out.append(_custom_tool(tool, where))
            continue
        if tool.get("type") != "function":
            raise UnsupportedParameter(
                f"'{where}.type' must be 'function' or 'custom'; the relay translates function "
                "and custom tools only",
                param=f"{where}.type",
            )
        fn, flat = _tool_head(tool, "function", where)
        parameters = fn.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise InvalidRequest(
                f"'{where}.function.parameters' must be a JSON schema object",
                param=f"{where}.function.parameters",
            )
        flat["parameters"] = parameters if parameters is not None else dict(EMPTY_PARAMETERS)
        strict = fn.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise InvalidRequest(
                f"'{where}.function.strict' must be true or false", param=f"{where}.function.strict"
            )
        flat["strict"] = bool(strict)
        out.append(flat)
    return out


GRAMMAR_SYNTAXES = ("lark", "regex")


def _tool_head(
    tool: dict[str, Any], kind: str, where: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A tool's ``function``/``custom`` object and the flat Responses tool begun from it
    (type, name, description)."""
    spec = _named(tool, kind, where)
    flat: dict[str, Any] = {"type": kind, "name": spec["name"]}
    description = optional_str(spec, "description", f"{where}.{kind}.description")
    if description is not None:
        flat["description"] = description
    return spec, flat


def _custom_tool(tool: dict[str, Any], where: str) -> dict[str, Any]:
    """A Chat custom tool as a Responses one (the grammar object flattened into format)."""
    spec, flat = _tool_head(tool, "custom", where)
    fmt = spec.get("format")
    at = f"{where}.custom.format"
    if fmt is None:
        return flat
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        flat["format"] = {"type": "text"}
        return flat
    if kind != "grammar":
        raise InvalidRequest(
            f'\'{at}\' must be {{"type": "text"}} or {{"type": "grammar", "grammar": '
            '{"syntax", "definition"}}',
            param=at,
        )
    assert isinstance(fmt, dict)
    grammar = fmt.get("grammar")
    syntax = grammar.get("syntax") if isinstance(grammar, dict) else None
    definition = grammar.get("definition") if isinstance(grammar, dict) else None
    if syntax not in GRAMMAR_SYNTAXES:
        raise InvalidRequest(f"'{at}.grammar.syntax' must be 'lark' or 'regex'", param=at)
    if not isinstance(definition, str):
        raise InvalidRequest(f"'{at}.grammar.definition' must be a string", param=at)
    flat["format"] = {"type": "grammar", "syntax": syntax, "definition": definition}
    return flat


def _translate_tool_choice(choice: Any) -> str | dict[str, Any] | None:
    if choice is None or choice in ("none", "auto", "required"):
        return choice  # type: ignore[no-any-return]
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind in ("function", "custom"):
        assert isinstance(choice, dict)
        named = choice.get(kind)
        name = named.get("name") if isinstance(named, dict) else None
        if isinstance(name, str) and name:
            return {"type": kind, "name": name}
        raise InvalidRequest(
            f"'tool_choice.{kind}.name' must name one of the tools",
            param=f"tool_choice.{kind}.name",
        )
    raise InvalidRequest(
        "'tool_choice' must be 'none', 'auto', 'required', "
        '{"type": "function", "function": {"name": ...}} or '
        '{"type": "custom", "custom": {"name": ...}}',
        param="tool_choice",
    )


# --- messages ------------------------------------------------------------------------


def _translate_messages(
    messages: Any,
) -> tuple[str | None, list[dict[str, Any]], tuple[tuple[int, int] | None, ...]]:
    if not isinstance(messages, list):
        raise InvalidRequest("'messages' must be an array of message objects", param="messages")
    if not messages:
        raise InvalidRequest("'messages' must contain at least one message", param="messages")
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    spans: list[tuple[int, int] | None] = []
    leading = True  # still in the run of system/developer messages that opens the chat
    call_kinds: dict[str, str] = {}  # call id → the item type it became, for its answer
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise InvalidRequest(f"'{where}' must be an object with a 'role'", param=where)
        role = message.get("role")
        start = len(items)
        if role in ("system", "developer"):
            text = _text_content(message.get("content"), where, allow_null=False)
            if leading:
                instructions.append(text)
                spans.append(None)
                continue
            items.append({"role": role, "content": [{"type": "input_text", "text": text}]})
        elif role == "user":
            items.append({"role": "user", "content": _user_content(message.get("content"), where)})
        elif role == "assistant":
            for item in _assistant_items(message, where):
                if "call_id" in item:
                    call_kinds.setdefault(item["call_id"], item["type"])
                items.append(item)
        elif role == "tool":
            items.append(_tool_output(message, where, call_kinds))
        elif role == "function":
            raise InvalidRequest(
                f"'{where}.role': the legacy 'function' role is not supported; send the result "
                "as a 'tool' message with the call's 'tool_call_id'",
                param=f"{where}.role",
            )
        else:
            raise InvalidRequest(
                f"'{where}.role' must be one of system, developer, user, assistant, tool; "
                f"got {role!r}",
                param=f"{where}.role",
            )
        leading = False
        spans.append((start, len(items)))
    return ("\n\n".join(instructions) if instructions else None), items, tuple(spans)


def _text_content(content: Any, where: str, *, allow_null: bool) -> str:
    """A string, or the concatenation of a list of text parts."""
    if isinstance(content, str):
        return content
    if content is None and allow_null:
        return ""
    if not isinstance(content, list):
        raise InvalidRequest(
            f"'{where}.content' must be a string or an array of text parts",
            param=f"{where}.content",
        )
    texts = []
    for j, part in enumerate(content):
        texts.append(_text_part(part, f"{where}.content[{j}]"))
    return "".join(texts)


def _text_part(part: Any, where: str) -> str:
    if not isinstance(part, dict):
        raise InvalidRequest(f"'{where}' must be an object with a 'type'", param=where)
    if part.get("type") != "text":
        raise InvalidRequest(
            f"'{where}.type' must be 'text' here; got {part.get('type')!r}", param=f"{where}.type"
        )
    text = part.get("text")
    if not isinstance(text, str):
        raise InvalidRequest(f"'{where}.text' must be a string", param=f"{where}.text")
    return text


def _user_content(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    if not isinstance(content, list) or not content:
        raise InvalidRequest(
            f"'{where}.content' must be a string or a non-empty array of content parts",
            param=f"{where}.content",
        )
    parts = []
    for j, part in enumerate(content):
        at = f"{where}.content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            parts.append({"type": "input_text", "text": _text_part(part, at)})
        elif kind == "image_url":
            parts.append(_image_part(part, at))
        elif isinstance(part, dict):
            raise InvalidRequest(
                f"'{at}.type' {kind!r} is not supported; user content parts may be 'text' or "
                "'image_url'",
                param=f"{at}.type",
            )
        else:
            raise InvalidRequest(f"'{at}' must be an object with a 'type'", param=at)
    return parts


def _image_part(part: dict[str, Any], where: str) -> dict[str, Any]:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else None
    if not isinstance(url, str) or not url:
        raise InvalidRequest(
            f"'{where}.image_url.url' must be an image URL or data URL string",
            param=f"{where}.image_url.url",
        )
    assert isinstance(image, dict)
    detail = image.get("detail")
    if detail is not None and detail not in IMAGE_DETAILS:
        raise InvalidRequest(
            f"'{where}.image_url.detail' must be one of low, high, auto",
            param=f"{where}.image_url.detail",
        )
    return {"type": "input_image", "image_url": url, "detail": detail or "auto"}


def _assistant_items(message: dict[str, Any], where: str) -> list[dict[str, Any]]:
    for legacy in ("function_call", "audio"):
        if message.get(legacy) is not None:
            raise UnsupportedParameter(
                f"'{where}.{legacy}' cannot be relayed; send tool calls as 'tool_calls' and "
                "text as 'content'",
                param=f"{where}.{legacy}",
            )
    text, refusals = _assistant_content(message.get("content"), where)
    refusal = optional_str(message, "refusal", f"{where}.refusal")
    if refusal:
        refusals.append(refusal)
    parts: list[dict[str, Any]] = []
    if text:
        parts.append({"type": "output_text", "text": text, "annotations": []})
    parts.extend({"type": "refusal", "refusal": r} for r in refusals)
    items: list[dict[str, Any]] = []
    if parts:
        items.append({"type": "message", "role": "assistant", "content": parts})
    calls = message.get("tool_calls")
    if calls is None:
        return items
    if not isinstance(calls, list):
        raise InvalidRequest(f"'{where}.tool_calls' must be an array", param=f"{where}.tool_calls")
    for k, call in enumerate(calls):
        items.append(_tool_call_item(call, f"{where}.tool_calls[{k}]"))
    return items


def _assistant_content(content: Any, where: str) -> tuple[str, list[str]]:
    """(concatenated text, refusal texts) of an assistant ``content``."""
    if content is None or isinstance(content, str):
        return content or "", []
    if not isinstance(content, list):
        raise InvalidRequest(
            f"'{where}.content' must be a string, an array of parts, or null",
            param=f"{where}.content",
        )
    texts: list[str] = []
    refusals: list[str] = []
    for j, part in enumerate(content):
        at = f"{where}.content[{j}]"
        if isinstance(part, dict) and part.get("type") == "refusal":
            refusal = part.get("refusal")
            if not isinstance(refusal, str):
                raise InvalidRequest(f"'{at}.refusal' must be a string", param=f"{at}.refusal")
            if refusal:
                refusals.append(refusal)
        else:
            texts.append(_text_part(part, at))
    return "".join(texts), refusals


def _tool_call_item(call: Any, where: str) -> dict[str, Any]:
    """A function_call item, or a custom_tool_call one for a call of type custom."""
    if not isinstance(call, dict):
        raise InvalidRequest(f"'{where}' must be an object", param=where)
    kind = call.get("type", "function")
    if kind not in ("function", "custom"):
        raise UnsupportedParameter(
            f"'{where}.type' must be 'function' or 'custom'; the relay translates function and "
            "custom tool calls only",
            param=f"{where}.type",
        )
    index = call.get("index")  # Cursor sends it; position already says the same
    if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
        raise InvalidRequest(f"'{where}.index' must be an integer", param=f"{where}.index")
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidRequest(f"'{where}.id' must be a non-empty string", param=f"{where}.id")
    if kind == "custom":
        return _custom_call(call, call_id, where)
    fn = _named(call, "function", where)
    name = fn["name"]
    arguments = fn.get("arguments")
    if not isinstance(arguments, str):  # the content is opaque; only the type is checked
        raise InvalidRequest(
            f"'{where}.function.arguments' must be a string", param=f"{where}.function.arguments"
        )
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def _named(holder: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """The ``function`` or ``custom`` object of a tool or call, with a non-empty ``name``."""
    named = holder.get(key)
    if not isinstance(named, dict):
        raise InvalidRequest(f"'{where}.{key}' must be an object", param=f"{where}.{key}")
    name = named.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest(
            f"'{where}.{key}.name' must be a non-empty string", param=f"{where}.{key}.name"
        )
    return named


def _custom_call(call: dict[str, Any], call_id: str, where: str) -> dict[str, Any]:
    custom = _named(call, "custom", where)
    name, text = custom["name"], custom.get("input")
    if not isinstance(text, str):  # freeform text: forwarded exactly as sent
        raise InvalidRequest(
            f"'{where}.custom.input' must be a string", param=f"{where}.custom.input"
        )
    return {"type": "custom_tool_call", "call_id": call_id, "name": name, "input": text}


OUTPUT_TYPES = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
}


def _tool_output(
    message: dict[str, Any], where: str, call_kinds: Mapping[str, str]
) -> dict[str, Any]:
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidRequest(
            f"'{where}.tool_call_id' must name the tool call this message answers",
            param=f"{where}.tool_call_id",
        )
    optional_str(message, "name", f"{where}.name")  # Cursor sends it; Responses has no slot
    output = _text_content(message.get("content"), where, allow_null=False)
    kind = call_kinds.get(call_id)
    if kind is None:  # the upstream would refuse it too, but could not say which message
        raise InvalidRequest(
            f"'{where}' answers tool call '{call_id}', which no earlier assistant message "
            "made; send the assistant message with that call before its result",
            param=f"{where}.tool_call_id",
        )
    return {"type": OUTPUT_TYPES[kind], "call_id": call_id, "output": output}
