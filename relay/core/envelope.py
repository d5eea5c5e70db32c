"""The visible-history normalizations of design §2: exactly these, and nothing more.

An assistant message is an *envelope*. Its equivalent forms hash equal:

- ``content`` as a string ≡ an array of exact text parts (``{"type": "text", "text": s}``,
  no other keys), concatenated;
- absent, ``null`` and empty content (``""``, ``[]``) ≡ empty text;
- absent and ``null`` ``tool_calls`` ≡ ``[]``;
- a tool call's ``index`` equal to its position in ``tool_calls`` is dropped (one that
  differs stays, and is hashed);
- the other fields of the Chat assistant message that may be null carry nothing visible
  when they are, and are dropped (:data:`NULLISH`): ``refusal`` null or ``""``,
  ``annotations`` null or ``[]``, ``audio`` null, ``function_call`` null. That is the
  answer's message echoed whole (the official Python SDK's ``message.model_dump()``, a
  script resending the JSON it got): ``{"role", "content", "refusal": null, ...}`` hashes
  as ``{"role", "content"}``. A non-empty value stays, and is hashed.

So a normalized envelope always has a string ``content`` (unless the content was not
normalizable, e.g. a refusal part: then it stays exactly as sent) and a ``tool_calls`` key,
and never a null or empty field of :data:`NULLISH`.

Deliberately *not* normalized: user, system, developer and tool messages (their
string-versus-parts distinction stays, the tool message ``name`` stays; none of their
fields may be null in the Chat schema), a non-empty ``refusal``, ``annotations``,
``audio`` or ``function_call``, an assistant ``name`` (a participant label, never null in
the schema), unknown fields anywhere (they may make a message distinct, never equal), and
tool-call argument strings, which are hashed as received, never reparsed.

``exclude_reasoning_content`` drops an assistant ``reasoning_content`` field; the default
keeps it hashed like any other field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final


def _null(value: Any) -> bool:
    return value is None


def _null_or_empty_text(value: Any) -> bool:
    return value is None or (type(value) is str and not value)


def _null_or_empty_list(value: Any) -> bool:
    return value is None or (type(value) is list and not value)


# The fields of the Chat assistant message (the SDK's ``ChatCompletionMessage`` and
# ``ChatCompletionAssistantMessageParam``) other than ``content`` and ``tool_calls`` that
# may be null, each with the values that carry nothing: translation sends nothing
# upstream for them (an empty refusal adds no part; annotations are never forwarded;
# audio and function_call are refused unless null), and a client shows nothing.
NULLISH: Final[Mapping[str, Callable[[Any], bool]]] = {
    "refusal": _null_or_empty_text,
    "annotations": _null_or_empty_list,
    "audio": _null,
    "function_call": _null,
}


def is_assistant(message: object) -> bool:
    """Whether a history message is an assistant envelope (the only normalized kind)."""
    return type(message) is dict and message.get("role") == "assistant"


def normalize_message(message: Any, *, exclude_reasoning_content: bool = False) -> Any:
    """A history message in its hashed form: assistants normalized, everything else as is."""
    if is_assistant(message):
        return normalize_assistant(message, exclude_reasoning_content=exclude_reasoning_content)
    return message


def normalize_assistant(
    message: Mapping[str, Any], *, exclude_reasoning_content: bool = False
) -> dict[str, Any]:
    """The normalized form of one assistant envelope (a new dict; the input is untouched)."""
    out = {
        key: value
        for key, value in message.items()
        # an exact str key only: a subclass stays, for measuring to refuse
        if not (type(key) is str and (empty := NULLISH.get(key)) is not None and empty(value))
    }
    out["content"] = _content(message.get("content"))
    calls = message.get("tool_calls")
    if calls is None:
        out["tool_calls"] = []
    elif type(calls) is list:
        out["tool_calls"] = [_without_redundant_index(call, i) for i, call in enumerate(calls)]
    if exclude_reasoning_content:
        out.pop("reasoning_content", None)
    return out


def _content(content: Any) -> Any:
    if content is None:
        return ""
    if type(content) is list:
        texts = []
        for part in content:
            if not _is_exact_text_part(part):
                return content  # not one of the §2 forms: hashed exactly as sent
            texts.append(part["text"])
        return "".join(texts)
    return content  # a string, or a value the §2 list does not cover


def _is_exact_text_part(part: Any) -> bool:
    return (
        type(part) is dict
        and len(part) == 2
        and part.get("type") == "text"
        and type(part.get("text")) is str
    )


def _without_redundant_index(call: Any, position: int) -> Any:
    if type(call) is dict and type(call.get("index")) is int and call["index"] == position:
        return {key: value for key, value in call.items() if key != "index"}
    return call
