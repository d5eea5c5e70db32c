"""The fake's strict thinking-mode Chat Completions provider (``POST /v1/chat/completions``).

:class:`ChatProvider` holds what the fake keeps for Chat: the reasoning seal (under the
fake's secret), the messages minted with empty reasoning, and the instance strictness
(set by the constructor, changed by ``POST /__fake/strict``, restored by ``reset``). The server
runs one request as :meth:`ChatProvider.probe`, then (unless the script says ``validate:
false``) :meth:`ChatProvider.check` (request shape, then the strictness rule), then
:meth:`ChatProvider.reply`.

Default reply (empty queue), derived from the request, like the Responses one:

- reasoning ``Thinking about: <last user text>`` (signed, see :mod:`strict_chat`);
- if the request has function tools and the last message is a user message containing
  ``CALL_TOOL``, a call of the first function tool with ``{}``; a forced ``tool_choice``
  (``required`` or ``{"type": "function", "function": {"name": ...}}``) after a user
  message does the same (with the named tool);
- otherwise ``content``: ``Echo: <last user text>`` (or ``Tool output: <content>`` after a
  ``tool`` message), a newline, and the probe's line, e.g.
  ``continuity: restored=2 exact=1 wrong=0 missing=1``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from fakeupstream.chat_reply import ChatReply, build_chat
from fakeupstream.rules import ApiError
from fakeupstream.scripts import FunctionCall, Message, OutputSpec, Reasoning, Script
from fakeupstream.strict_chat import (
    ChatContinuity,
    EmptyLedger,
    Strictness,
    ThoughtSeal,
    assistant_key,
    check_strict,
    content_text,
    parse_strictness,
    probe_chat,
)

ROLES = ("system", "developer", "user", "assistant", "tool")


class ChatProvider:
    def __init__(self, secret: bytes, strict: Strictness | Mapping[str, Any] | str | None) -> None:
        self.seal = ThoughtSeal(secret)
        self.empty = EmptyLedger()
        if strict is None or isinstance(strict, Strictness):
            self.default_strictness = strict if strict is not None else Strictness()
        else:
            self.default_strictness = parse_strictness(strict)
        self.strictness = self.default_strictness

    def reset(self) -> None:
        """Forget empty-minted messages and go back to the constructor's strictness."""
        self.empty.clear()
        self.strictness = self.default_strictness

    def recognize(self, value: str, message_key: str) -> bool:
        if value == "":
            return message_key in self.empty
        return self.seal.recognizes(value, message_key)

    def probe(self, body: Mapping[str, Any]) -> ChatContinuity:
        return probe_chat(chat_messages(body), self.recognize)

    def check(self, body: Mapping[str, Any], script: Script, report: ChatContinuity) -> None:
        """Raise the :class:`ApiError` the provider rejects the probed request with, if any."""
        validate_chat(body)
        strictness = script.strict if script.strict is not None else self.strictness
        has_tools = bool(function_tools(body))
        check_strict(chat_messages(body), report, strictness, has_tools=has_tools)

    def reply(
        self,
        body: Mapping[str, Any],
        script: Script,
        report: ChatContinuity,
        *,
        rng: random.Random,
        created: int,
    ) -> ChatReply:
        """The answer to a request that ``report`` probed (and :meth:`check` let through)."""
        messages = chat_messages(body)
        output = script.output
        if output is None:
            output = default_chat_output(body, messages, report)

        def mint(text: str, message: Mapping[str, Any]) -> str:
            key = assistant_key(message)
            if text == "":
                self.empty.add(key)
                return ""
            return self.seal.mint(text, key, f"{rng.getrandbits(32):08x}")

        default = f"Thinking about: {_clip(last_user_text(messages))}"
        return build_chat(
            body, script, output, rng=rng, created=created, default_reasoning=default, mint=mint
        )


def chat_messages(body: Mapping[str, Any]) -> list[Any]:
    value = body.get("messages")
    return list(value) if isinstance(value, list) else []


def function_tools(body: Mapping[str, Any]) -> list[str]:
    """Names of the request's function tools (Chat's nested shape, or a flat ``name``)."""
    names = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, Mapping) or tool.get("type") != "function":
            continue
        function = tool.get("function")
        name = function.get("name") if isinstance(function, Mapping) else tool.get("name")
        if isinstance(name, str):
            names.append(name)
    return names


def last_user_text(messages: Sequence[Any]) -> str:
    return next(
        (
            content_text(m.get("content"))
            for m in reversed(messages)
            if isinstance(m, Mapping) and m.get("role") == "user"
        ),
        "",
    )


def default_chat_output(
    body: Mapping[str, Any], messages: Sequence[Any], report: ChatContinuity
) -> tuple[OutputSpec, ...]:
    """What the fake thinking model says when no script is queued (module docstring)."""
    last = messages[-1] if messages and isinstance(messages[-1], Mapping) else {}
    user_text = last_user_text(messages)
    thought = Reasoning((f"Thinking about: {_clip(user_text)}",))
    tool = _tool_to_call(body, last)
    if tool is not None:
        return (thought, FunctionCall(tool, "{}"))
    if last.get("role") == "tool":
        heard = f"Tool output: {_clip(content_text(last.get('content')))}"
    else:
        heard = f"Echo: {_clip(user_text)}"
    return (thought, Message(f"{heard}\n{report.summary()}"))


def _tool_to_call(body: Mapping[str, Any], last: Mapping[str, Any]) -> str | None:
    names = function_tools(body)
    if not names or last.get("role") != "user":
        return None
    choice = body.get("tool_choice")
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        function = choice.get("function")
        named = function.get("name") if isinstance(function, Mapping) else choice.get("name")
        return str(named)
    if choice == "required" or "CALL_TOOL" in content_text(last.get("content")):
        return names[0]
    return None


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


# --- request checks ------------------------------------------------------------------


def validate_chat(body: Mapping[str, Any]) -> None:
    """The few shape checks every Chat provider makes, in OpenAI's words."""
    for name in ("model", "messages"):
        if body.get(name) is None:
            raise _bad(f"Missing required parameter: '{name}'.", name, "missing_required_parameter")
    if not isinstance(body["model"], str):
        raise _type_error("model", "a string", body["model"])
    messages = body["messages"]
    if not isinstance(messages, list):
        raise _type_error("messages", "an array", messages)
    if not messages:
        raise _bad(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got "
            "an empty array instead.",
            "messages",
            "empty_array",
        )
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise _type_error(where, "an object", message)
        role = message.get("role")
        if role is None:
            raise _bad(
                f"Missing required parameter: '{where}.role'.",
                f"{where}.role",
                "missing_required_parameter",
            )
        if role not in ROLES:
            listing = ", ".join(f"'{r}'" for r in ROLES[:-1]) + f", and '{ROLES[-1]}'"
            raise _bad(
                f"Invalid value: '{role}'. Supported values are: {listing}.",
                f"{where}.role",
                "invalid_value",
            )
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _type_error("stream", "a boolean", stream)
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise _type_error("tools", "an array", tools)


def _bad(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def _type_error(param: str, expected: str, value: Any) -> ApiError:
    kind = "an object"
    if value is None:
        kind = "null"
    elif isinstance(value, bool):
        kind = "a boolean"
    elif isinstance(value, int | float):
        kind = "a number"
    elif isinstance(value, str):
        kind = "a string"
    elif isinstance(value, list):
        kind = "an array"
    return _bad(
        f"Invalid type for '{param}': expected {expected}, but got {kind} instead.",
        param,
        "invalid_type",
    )
