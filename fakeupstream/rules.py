"""What OpenAI rejects, with OpenAI's status codes and texts.

Each check raises :class:`ApiError`; the first failing check wins, in this order:
auth, JSON body, required/unknown/typed parameters, input item shapes, model-specific
parameters, then the replay rules (duplicate ids, ciphertext, missing reasoning items,
tool call pairing). The texts and where each was seen: docs/development.md, *The fake
upstream's refusals*.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from fakeupstream.ciphertext import Ledger, Sealed

KEYS_URL = "https://platform.openai.com/account/api-keys"

# Every top-level parameter of POST /v1/responses; anything else is "Unknown parameter".
KNOWN_PARAMETERS = frozenset(
    {
        "background", "context_management", "conversation", "include", "input",
        "instructions", "max_output_tokens", "max_tool_calls", "metadata", "model",
        "parallel_tool_calls", "previous_response_id", "prompt", "prompt_cache_key",
        "prompt_cache_retention", "reasoning", "safety_identifier", "service_tier", "store",
        "stream", "stream_options", "temperature", "text", "tool_choice", "tools",
        "top_logprobs", "top_p", "truncation", "user",
    }
)  # fmt: skip

INCLUDABLE = (
    "code_interpreter_call.outputs",
    "computer_call_output.output.image_url",
    "file_search_call.results",
    "message.input_image.image_url",
    "message.output_text.logprobs",
    "reasoning.encrypted_content",
    "web_search_call.action.sources",
)

# Item types checked in depth; the other known types pass through unchecked.
CHECKED_ITEM_TYPES = (
    "message", "reasoning", "function_call", "function_call_output", "custom_tool_call",
    "custom_tool_call_output",
)  # fmt: skip
OTHER_ITEM_TYPES = (
    "item_reference", "file_search_call", "computer_call", "computer_call_output",
    "web_search_call", "image_generation_call", "code_interpreter_call", "local_shell_call",
    "local_shell_call_output", "shell_call", "shell_call_output", "apply_patch_call",
    "apply_patch_call_output", "mcp_list_tools", "mcp_approval_request",
    "mcp_approval_response", "mcp_call", "compaction",
)  # fmt: skip
ID_PREFIXES = {
    "message": "msg",
    "reasoning": "rs",
    "function_call": "fc",
    "custom_tool_call": "ctc",
}
# A call item type and the output type that answers it: an output pairs only with a call of
# its own kind (a function_call_output never answers a custom_tool_call).
CALL_OUTPUTS = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
}
# How the pairing errors name each kind.
CALL_NAMES = {"function_call": "function call", "custom_tool_call": "custom tool call"}
GRAMMAR_SYNTAXES = ("lark", "regex")
ROLES = ("assistant", "system", "developer", "user")
USER_PARTS = ("input_text", "input_image", "input_file")
ASSISTANT_PARTS = ("output_text", "refusal")


class ApiError(Exception):
    """An answer in OpenAI's error envelope."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",  # the envelope's field name
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def envelope(self) -> dict[str, Any]:
        error = {"message": self.message, "type": self.type, "param": self.param}
        return {"error": {**error, "code": self.code}}


def _bad(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


# --- model families ------------------------------------------------------------------

_REASONING_MODEL = re.compile(r"(gpt-5(?!-chat)|o[134](?!\d)|codex)")


def is_reasoning_model(model: str) -> bool:
    """gpt-5* except gpt-5-chat*, o1/o3/o4*, codex*: only default sampling, reasoning items."""
    return _REASONING_MODEL.match(model.strip().lower().rsplit("/", 1)[-1]) is not None


# --- auth and body -------------------------------------------------------------------


def check_auth(header: str | None, api_keys: Collection[str] | None) -> str:
    """The presented API key, or the 401 OpenAI answers."""
    scheme, _, key = (header or "").strip().partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise ApiError(
            401,
            "You didn't provide an API key. You need to provide your API key in an "
            "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), "
            "or as the password field (with blank username) if you're accessing the API "
            "from your browser and are prompted for a username and password. You can obtain "
            f"an API key from {KEYS_URL}.",
        )
    if api_keys is not None and key not in api_keys:
        raise ApiError(
            401,
            f"Incorrect API key provided: {mask_key(key)}. "
            f"You can find your API key at {KEYS_URL}.",
            code="invalid_api_key",
        )
    return key


def mask_key(key: str) -> str:
    """OpenAI shows a key's first five and last four characters; very short keys whole."""
    if len(key) < 10:
        return key
    return key[:5] + "*" * max(3, len(key) - 9) + key[-4:]


_JSON_HINT = (
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't "
    "using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was "
    "sent was not valid JSON. If you have trouble figuring out how to fix this, please "
    "contact us through our help center at help.openai.com.)"
)


def parse_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _bad(_JSON_HINT) from None
    if not isinstance(body, dict):
        raise _bad(
            f"Invalid type for 'body': expected an object, but got {_kind(body)} instead.",
            code="invalid_type",
        )
    return body


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _type_error(param: str, expected: str, value: Any) -> ApiError:
    return _bad(
        f"Invalid type for '{param}': expected {expected}, but got {_kind(value)} instead.",
        param,
        "invalid_type",
    )


def _invalid_value(param: str, value: Any, supported: Sequence[str]) -> ApiError:
    quoted = [f"'{s}'" for s in supported]
    listing = (
        ", ".join(quoted[:-1]) + f", and {quoted[-1]}"
        if len(quoted) > 2
        else (" and ".join(quoted))
    )
    return _bad(
        f"Invalid value: '{value}'. Supported values are: {listing}.", param, "invalid_value"
    )


def _missing(param: str) -> ApiError:
    return _bad(f"Missing required parameter: '{param}'.", param, "missing_required_parameter")


# --- the request ---------------------------------------------------------------------

OpenToken = Callable[[str, str], Sealed | None]  # (item_id, token) under this key and model


def validate(body: Mapping[str, Any], *, open_token: OpenToken, ledger: Ledger) -> None:
    """Raise the first :class:`ApiError` OpenAI would answer ``body`` with."""
    _check_parameters(body)
    items = input_items(body)
    for index, item in enumerate(items):
        _check_item(index, item)
    _check_model_parameters(body, items)
    _check_duplicates(items)
    _check_ciphertexts(items, open_token)
    _check_references(body, items, ledger)
    _check_reasoning_followed(items)
    _check_required_reasoning(items, ledger)
    _check_tool_pairs(items)


def input_items(body: Mapping[str, Any]) -> list[Any]:
    """``input`` as a list of items (a string is one user message)."""
    value = body.get("input")
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


def _check_parameters(body: Mapping[str, Any]) -> None:
    if "model" not in body or body["model"] is None:
        raise _missing("model")
    if not isinstance(body["model"], str):
        raise _type_error("model", "a string", body["model"])
    for name in sorted(body):
        if name not in KNOWN_PARAMETERS:
            raise _bad(f"Unknown parameter: '{name}'.", name, "unknown_parameter")
    if body.get("input") is None and body.get("previous_response_id") is None:
        raise _missing("input")
    if "input" in body and not isinstance(body["input"], str | list | type(None)):
        raise _type_error("input", "one of a string or array of input items", body["input"])
    for name in ("stream", "store", "parallel_tool_calls", "background"):
        if body.get(name) is not None and not isinstance(body[name], bool):
            raise _type_error(name, "a boolean", body[name])
    for name, high in (("temperature", 2), ("top_p", 1)):
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _type_error(name, "a decimal", value)
        if not 0 <= value <= high:
            raise _bad(
                f"Invalid '{name}': decimal above maximum value. Expected a value <= {high}, "
                f"but got {_number(value)} instead.",
                name,
                "decimal_above_max_value" if value > high else "decimal_below_min_value",
            )
    for name in ("instructions", "previous_response_id", "prompt_cache_key", "user"):
        if body.get(name) is not None and not isinstance(body[name], str):
            raise _type_error(name, "a string", body[name])
    include = body.get("include")
    if include is not None:
        if not isinstance(include, list):
            raise _type_error("include", "an array of strings", include)
        for position, value in enumerate(include):
            if value not in INCLUDABLE:
                raise _invalid_value(f"include[{position}]", value, INCLUDABLE)
    _check_options(body)
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise _type_error("tools", "an array", tools)
    for position, tool in enumerate(tools or []):
        if not isinstance(tool, dict):
            raise _type_error(f"tools[{position}]", "an object", tool)
        if tool.get("type") == "function" and not isinstance(tool.get("name"), str):
            raise _missing(f"tools[{position}].name")
        if tool.get("type") == "custom":
            _check_custom_tool(f"tools[{position}]", tool)
    _check_custom_tool_choice(body.get("tool_choice"), tools or [])


def _check_custom_tool(where: str, tool: Mapping[str, Any]) -> None:
    """A custom tool: a name, and a format that is text or a lark/regex grammar."""
    _require_string(where, tool, "name")
    fmt = tool.get("format")
    if fmt is None:
        return
    if not isinstance(fmt, dict):
        raise _type_error(f"{where}.format", "an object", fmt)
    kind = fmt.get("type")
    if kind not in ("text", "grammar"):
        raise _invalid_value(f"{where}.format.type", kind, ("text", "grammar"))
    if kind == "grammar":
        if fmt.get("syntax") not in GRAMMAR_SYNTAXES:
            raise _invalid_value(f"{where}.format.syntax", fmt.get("syntax"), GRAMMAR_SYNTAXES)
        _require_string(f"{where}.format", fmt, "definition")


def _check_custom_tool_choice(choice: Any, tools: Sequence[Any]) -> None:
    if not isinstance(choice, dict) or choice.get("type") != "custom":
        return
    names = {t.get("name") for t in tools if isinstance(t, dict) and t.get("type") == "custom"}
    if choice.get("name") not in names:
        # The text OpenAI answers for a function tool_choice naming no declared function,
        # with the tool type in its place (not observed for custom tools: inferred).
        raise _bad("Tool choice 'custom' not found in 'tools' parameter.", "tool_choice")


# The nested options Cursor sends and their values, as OpenAI's API reference lists them.
# stream_options has include_obfuscation only: OpenAI answers a Chat-style include_usage
# with "Unknown parameter: 'stream_options.include_usage'." (reported by Cursor users
# whose gateway forwarded it).
OPTION_VALUES: dict[str, dict[str, tuple[str, ...] | None]] = {
    "stream_options": {"include_obfuscation": None},
    "reasoning": {
        "effort": ("none", "minimal", "low", "medium", "high", "xhigh"),
        "summary": ("auto", "concise", "detailed"),
        "generate_summary": ("auto", "concise", "detailed"),
        "context": ("auto", "all_turns", "current_turn"),  # GPT-5.6 and later
    },
    "text": {"format": None, "verbosity": ("low", "medium", "high")},
}
TOP_LEVEL_VALUES = {
    "truncation": ("auto", "disabled"),
    "prompt_cache_retention": ("in-memory", "24h"),
}


def _check_options(body: Mapping[str, Any]) -> None:
    for name, allowed in TOP_LEVEL_VALUES.items():
        value = body.get(name)
        if value is not None and value not in allowed:
            raise _invalid_value(name, value, allowed)
    for name, keys in OPTION_VALUES.items():
        options = body.get(name)
        if options is None:
            continue
        if not isinstance(options, dict):
            raise _type_error(name, "an object", options)
        for key, value in options.items():
            if key not in keys:
                raise _bad(f"Unknown parameter: '{name}.{key}'.", f"{name}.{key}",
                           "unknown_parameter")  # fmt: skip
            values = keys[key]
            if values is not None and value is not None and value not in values:
                raise _invalid_value(f"{name}.{key}", value, values)


def _check_item(index: int, item: Any) -> None:
    where = f"input[{index}]"
    if not isinstance(item, dict):
        raise _type_error(where, "an object", item)
    kind = item.get("type", "message" if "role" in item else None)
    if kind is None:
        raise _missing(f"{where}.type")
    item_id = item.get("id")
    if item_id is not None and not isinstance(item_id, str):  # of every type: ids are keys
        raise _type_error(f"{where}.id", "a string", item_id)
    if kind not in CHECKED_ITEM_TYPES:
        if kind not in OTHER_ITEM_TYPES:
            raise _invalid_value(f"{where}.type", kind, CHECKED_ITEM_TYPES + OTHER_ITEM_TYPES)
        return
    if item_id is not None:
        prefix = ID_PREFIXES.get(kind)
        if prefix is not None and not item_id.startswith(prefix):
            raise _bad(
                f"Invalid '{where}.id': '{item_id}'. Expected an ID that begins with '{prefix}'.",
                f"{where}.id",
                "invalid_value",
            )
    if kind == "message":
        _check_message(where, item)
    elif kind == "reasoning":
        _check_reasoning(where, item)
    elif kind == "function_call":
        for name in ("call_id", "name", "arguments"):
            _require_string(where, item, name)
    elif kind == "custom_tool_call":
        for name in ("call_id", "name", "input"):
            _require_string(where, item, name)
    else:  # function_call_output, custom_tool_call_output
        _require_string(where, item, "call_id")
        if "output" not in item:
            raise _missing(f"{where}.output")
        if not isinstance(item["output"], str | list):
            raise _type_error(f"{where}.output", "a string or array of content", item["output"])


def _require_string(where: str, item: Mapping[str, Any], name: str) -> None:
    if item.get(name) is None:
        raise _missing(f"{where}.{name}")
    if not isinstance(item[name], str):
        raise _type_error(f"{where}.{name}", "a string", item[name])


def _check_message(where: str, item: Mapping[str, Any]) -> None:
    role = item.get("role")
    if role is None:
        raise _missing(f"{where}.role")
    if role not in ROLES:
        raise _invalid_value(f"{where}.role", role, ROLES)
    content = item.get("content")
    if content is None:
        raise _missing(f"{where}.content")
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise _type_error(f"{where}.content", "one of a string or array of content", content)
    allowed = ASSISTANT_PARTS if role == "assistant" else USER_PARTS
    for position, part in enumerate(content):
        here = f"{where}.content[{position}]"
        if not isinstance(part, dict):
            raise _type_error(here, "an object", part)
        if part.get("type") not in allowed:
            raise _invalid_value(f"{here}.type", part.get("type"), allowed)
        if part["type"] in ("input_text", "output_text"):
            _require_string(here, part, "text")
        elif part["type"] == "refusal":
            _require_string(here, part, "refusal")
        elif part["type"] == "input_image":
            url = part.get("image_url")
            if url is None and part.get("file_id") is None:
                raise _missing(f"{here}.image_url")
            if url is not None and not isinstance(url, str):
                raise _type_error(f"{here}.image_url", "a string", url)
            detail = part.get("detail")
            if detail is not None and detail not in ("low", "high", "auto", "original"):
                raise _invalid_value(f"{here}.detail", detail, ("low", "high", "auto", "original"))


def _check_reasoning(where: str, item: Mapping[str, Any]) -> None:
    if item.get("id") is None:
        raise _missing(f"{where}.id")
    summary = item.get("summary")
    if summary is None:
        raise _missing(f"{where}.summary")
    if not isinstance(summary, list):
        raise _type_error(f"{where}.summary", "an array", summary)
    for position, part in enumerate(summary):
        here = f"{where}.summary[{position}]"
        if not isinstance(part, dict) or part.get("type") != "summary_text":
            raise _invalid_value(f"{here}.type", _get(part, "type"), ("summary_text",))
        _require_string(here, part, "text")
    token = item.get("encrypted_content")
    if token is not None and not isinstance(token, str):
        raise _type_error(f"{where}.encrypted_content", "a string", token)


def _get(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else value


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _check_model_parameters(body: Mapping[str, Any], items: Sequence[Any]) -> None:
    model = str(body["model"])
    if is_reasoning_model(model):
        for name in ("temperature", "top_p"):
            value = body.get(name)
            if value is not None and value != 1:
                raise _bad(
                    f"Unsupported value: '{name}' does not support {_number(value)} with this "
                    "model. Only the default (1) value is supported.",
                    name,
                    "unsupported_value",
                )
        return
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort") is not None:
        raise _bad(
            "Unsupported parameter: 'reasoning.effort' is not supported with this model.",
            "reasoning.effort",
            "unsupported_parameter",
        )
    if "reasoning.encrypted_content" in (body.get("include") or []):
        raise _bad("Encrypted content is not supported with this model.", "include")
    if any(item.get("encrypted_content") is not None for item in items):
        raise _bad("Encrypted content is not supported with this model.")


def _check_duplicates(items: Sequence[Mapping[str, Any]]) -> None:
    seen: set[str] = set()
    for item in items:
        item_id = item.get("id")
        if item_id is None:
            continue
        if item_id in seen:
            raise _bad(
                f"Duplicate item found with id {item_id}. "
                "Remove duplicate items from your input and try again.",
                "input",
            )
        seen.add(item_id)


def _check_ciphertexts(items: Sequence[Mapping[str, Any]], open_token: OpenToken) -> None:
    for item in items:
        token = item.get("encrypted_content")
        if item.get("type") != "reasoning" or token is None:
            continue
        if open_token(str(item["id"]), token) is None:
            raise _bad(
                f"The encrypted content {token[:12]}... could not be verified.",
                code="invalid_encrypted_content",
            )


def _check_references(
    body: Mapping[str, Any], items: Sequence[Mapping[str, Any]], ledger: Ledger
) -> None:
    previous = body.get("previous_response_id")
    if previous is not None and previous not in ledger.stored_responses:
        raise ApiError(
            404,
            f"Previous response with id '{previous}' not found.",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    store = body.get("store") is not False
    for item in items:
        by_reference = item.get("type") == "item_reference" or (
            item.get("type") == "reasoning" and item.get("encrypted_content") is None
        )
        if not by_reference or (store and item.get("id") in ledger.stored_items):
            continue
        item_id = item.get("id")
        message = f"Item with id '{item_id}' not found."
        if not store:
            message += (
                " Items are not persisted when `store` is set to false. Try again with `store`"
                " set to true, or remove this item from your input."
            )
        raise ApiError(404, message, param="input")


def _check_reasoning_followed(items: Sequence[Mapping[str, Any]]) -> None:
    for index, item in enumerate(items):
        if item.get("type") != "reasoning":
            continue
        # Consecutive reasoning items share the output item that finally follows them.
        following = next((i for i in items[index + 1 :] if i.get("type") != "reasoning"), None)
        if following is None or not _is_output_item(following):
            raise _bad(
                f"Item '{item['id']}' of type 'reasoning' was provided without its required "
                "following item.",
                "input",
            )


def _is_output_item(item: Mapping[str, Any]) -> bool:
    kind = item.get("type", "message")
    if kind == "message":
        return item.get("role") == "assistant"
    return not kind.endswith("_output") and kind not in ("item_reference", "mcp_approval_response")


def _check_required_reasoning(items: Sequence[Mapping[str, Any]], ledger: Ledger) -> None:
    present: set[str] = set()
    for item in items:
        item_id = item.get("id")
        if item.get("type") == "reasoning":
            present.add(str(item_id))
            continue
        required = ledger.requires.get(item_id) if isinstance(item_id, str) else None
        if required is not None and required not in present:
            kind = item.get("type", "message")
            raise _bad(
                f"Item '{item_id}' of type '{kind}' was provided without its required "
                f"'reasoning' item: '{required}'.",
                "input",
            )


def _check_tool_pairs(items: Sequence[Mapping[str, Any]]) -> None:
    """Every output answers an earlier call of its own kind; every call has its output,
    unless only calls (and reasoning) follow it. Sources of the texts (docs/development.md):
    ``No tool call found for function call output with call_id call_...`` and ``No tool
    output found for function call call_...`` (OpenAI, 400, param input);
    ``No tool output found for custom tool call call_...`` (seen in the field: Codex and
    agent-SDK issue threads); the custom *output* text is the function one with the kind
    named as in the custom-call text (its analogue, not observed)."""
    calls_seen: dict[str, set[str]] = {kind: set() for kind in CALL_OUTPUTS}
    answers = {output: call for call, output in CALL_OUTPUTS.items()}
    for item in items:
        kind = item.get("type")
        if kind in calls_seen:
            calls_seen[kind].add(item["call_id"])
        elif kind in answers and item["call_id"] not in calls_seen[answers[kind]]:
            raise _bad(
                f"No tool call found for {CALL_NAMES[answers[kind]]} output with call_id "
                f"{item['call_id']}.",
                "input",
            )
    outputs = {(i.get("type"), i["call_id"]) for i in items if i.get("type") in answers}
    for index, item in enumerate(items):
        kind = item.get("type")
        if kind not in CALL_OUTPUTS or (CALL_OUTPUTS[kind], item["call_id"]) in outputs:
            continue
        # Trailing calls may still be awaiting their outputs; anything else after is an error.
        rest = items[index + 1 :]
        if any(later.get("type") not in (*CALL_OUTPUTS, "reasoning") for later in rest):
            raise _bad(f"No tool output found for {CALL_NAMES[kind]} {item['call_id']}.", "input")
