"""The parameter policy of a Chat request (pure): which top-level keys are translated,
forwarded unchanged (type-checked), accepted only at a neutral value, droppable on
request, or refused; and the translation of the scalar controls (stream flags, reasoning,
output size, response format). The reasoning and stream helpers are shared with the
Responses-shaped path (``responses_input``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from relay.errors import InvalidRequest, UnsupportedParameter
from relay.settings.model_alias import ModelAlias
from relay.translate.sampling import is_reasoning_model


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

# Keys translated by dedicated code (here, ``tools``, ``messages``) or consumed by the relay.
TRANSLATED = frozenset(
    {
        "model", "messages", "stream", "stream_options", "tools", "tool_choice",
        "response_format", "verbosity", "max_tokens", "max_completion_tokens",
        "reasoning_effort", "reasoning", "temperature", "top_p",
    }
)  # fmt: skip


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


def check_known_key(key: str, value: Any) -> None:
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


def max_output_tokens(body: Mapping[str, Any]) -> int | None:
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


def translate_text(response_format: Any, verbosity: Any) -> dict[str, Any]:
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
