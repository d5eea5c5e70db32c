"""A strict thinking-mode Chat Completions provider: minted reasoning, its probe, its rules.

Thinking-mode providers (DeepSeek, Kimi, QwQ, GLM thinking models) answer with
``reasoning_content`` beside ``content`` and reject a follow-up whose earlier assistant
messages do not carry it back. This module is the pure part of the fake's
``POST /v1/chat/completions``:

**Minting.** Every answer's ``reasoning_content`` is ``<text> #<sig>``: the text (scripted,
or ``Thinking about: <last user text>``) and a 24-hex signature, 8 hex of nonce then 16 hex
of HMAC-SHA256 under the fake's secret over the nonce, the text and the *visible* assistant
message it was minted with (:func:`assistant_key`: its content text and each tool call's
id, name and arguments, JSON arguments compared with sorted keys). So the fake recognizes,
without keeping state, that a ``reasoning_content`` came back exactly as minted *for that
message*; nobody without the secret can forge one. A scripted empty reasoning text mints
``""`` (nothing to sign): the fake remembers those messages (:class:`EmptyLedger`), and
``""`` is then the exact value for them.

**Probe.** :func:`probe_chat` classifies every assistant message in the request:
``exact`` (its ``reasoning_content`` is what the fake minted for it), ``wrong`` (present but
different: altered, moved to another message, invented, or ``""`` for a message minted
with text) or ``missing`` (absent or null). ``restored`` counts the present ones
(``exact + wrong``). The reply's summary line is
``continuity: restored=N exact=N wrong=N missing=N``.

**Rules** (:data:`RULES`, :func:`check_strict`), all HTTP 400 ``invalid_request_error``
with ``param`` and ``code`` null; the first offending message (lowest index) is named:

- ``tool_turns`` (default; DeepSeek's documentation): every assistant message with
  ``tool_calls`` must be ``exact``, else
  ``The reasoning_content in the thinking mode must be passed back to the API.``
- ``tool_turns_indexed``: the same check, the variant naming the index in ``messages``:
  ``Missing `reasoning_content` field in the assistant message at message index 46.``
- ``kimi``: the same check, Kimi's text:
  ``thinking is enabled but reasoning_content is missing in assistant tool call message at index 2``
- ``all_turns_with_tools``: once the request has a non-empty ``tools``, *every* assistant
  message (plain text turns too) must be ``exact``; DeepSeek's text.
- ``legacy_rejects`` (legacy ``deepseek-reasoner``): any message carrying a non-null
  ``reasoning_content`` (``""`` included: the field is sent) is rejected with
  :data:`LEGACY_MESSAGE`, a text the fake invented (the real one is not on record here).
- ``off``: no check.

``prefix`` puts ``Param Incorrect: `` before whichever text the rule produces (some
gateways wrap DeepSeek's error so). An empty-string ``reasoning_content`` therefore fails
every checking rule unless the message was minted with empty reasoning, and
``legacy_rejects`` rejects it outright.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fakeupstream.rules import ApiError

RULES = (
    "tool_turns",
    "tool_turns_indexed",
    "kimi",
    "all_turns_with_tools",
    "legacy_rejects",
    "off",
)
DEFAULT_RULE = "tool_turns"
PREFIX = "Param Incorrect: "
DEEPSEEK_MESSAGE = "The reasoning_content in the thinking mode must be passed back to the API."
INDEXED_MESSAGE = (
    "Missing `reasoning_content` field in the assistant message at message index {index}."
)
KIMI_MESSAGE = (
    "thinking is enabled but reasoning_content is missing in assistant tool call message "
    "at index {index}"
)
# Invented by the fake: legacy deepseek-reasoner's documented behaviour, not its text.
LEGACY_MESSAGE = (
    "reasoning_content is not accepted in input messages by this model; remove it from the "
    "message at message index {index}."
)

State = Literal["exact", "wrong", "missing"]


# --- strictness ----------------------------------------------------------------------


class StrictError(ValueError):
    """A strictness setting that cannot be used; the message says what is accepted."""


@dataclass(frozen=True)
class Strictness:
    rule: str = DEFAULT_RULE
    prefix: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "prefix": self.prefix}


def parse_strictness(raw: Any, base: Strictness | None = None) -> Strictness:
    """A rule name, or ``{"rule": ..., "prefix": ...}`` (missing keys keep ``base``'s).

    Raises :class:`StrictError` (a ``ValueError``) saying what is accepted.
    """
    base = base if base is not None else Strictness()
    if isinstance(raw, str):
        raw = {"rule": raw}
    if not isinstance(raw, Mapping):
        raise StrictError("'strict' must be a rule name or an object with 'rule' and/or 'prefix'")
    unknown = sorted(set(raw) - {"rule", "prefix"})
    if unknown:
        raise StrictError(
            f"unknown strict key(s) {', '.join(map(repr, unknown))}; allowed: rule, prefix"
        )
    rule = raw.get("rule", base.rule)
    if rule not in RULES:
        raise StrictError(f"'strict.rule' must be one of {', '.join(RULES)}; got {rule!r}")
    prefix = raw.get("prefix", base.prefix)
    if not isinstance(prefix, bool):
        raise StrictError(f"'strict.prefix' must be true or false; got {prefix!r}")
    return Strictness(str(rule), prefix)


# --- the visible assistant message and its minted reasoning ---------------------------


def content_text(content: Any) -> str:
    """A Chat message's text: a string, or its text parts joined (``None``: empty)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content if isinstance(content, list) else []:
        if isinstance(part, Mapping) and isinstance(part.get("text"), str):
            parts.append(part["text"])
    return "".join(parts)


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        try:
            return json.dumps(json.loads(value), sort_keys=True)
        except (ValueError, RecursionError):
            return value
    return json.dumps(value, sort_keys=True)


def assistant_key(message: Mapping[str, Any]) -> str:
    """A digest of what a client sees of an assistant message (see the module docstring)."""
    calls = []
    listed = message.get("tool_calls")
    for call in listed if isinstance(listed, list) else []:
        if not isinstance(call, Mapping):
            continue
        function = call.get("function")
        function = function if isinstance(function, Mapping) else {}
        calls.append([call.get("id"), function.get("name"), _arguments(function.get("arguments"))])
    visible = [content_text(message.get("content")), calls]
    data = json.dumps(visible, ensure_ascii=False, separators=(",", ":")).encode()
    return hashlib.sha256(data).hexdigest()[:32]


class ThoughtSeal:
    """Mints and recognizes signed ``reasoning_content`` under the fake's secret."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise StrictError("the reasoning secret must be at least 16 bytes")
        self._key = key

    def mint(self, text: str, message_key: str, nonce: str) -> str:
        """``text #<nonce><tag>``; ``nonce`` is 8 hex characters."""
        if len(nonce) != 8:
            raise StrictError("nonce must be 8 hex characters")
        return f"{text} #{nonce}{self._tag(text, message_key, nonce)}"

    def recognizes(self, value: str, message_key: str) -> bool:
        text, sep, sig = value.rpartition(" #")
        if not sep or len(sig) != 24:
            return False
        nonce, tag = sig[:8], sig[8:]
        return hmac.compare_digest(tag, self._tag(text, message_key, nonce))

    def _tag(self, text: str, message_key: str, nonce: str) -> str:
        data = "\0".join(["chat-reasoning", nonce, text, message_key]).encode()
        return hmac.new(self._key, data, hashlib.sha256).hexdigest()[:16]


@dataclass
class EmptyLedger:
    """Assistant messages the fake minted with empty reasoning (an ordered, bounded set)."""

    keys: dict[str, None] = field(default_factory=dict)
    limit: int = 100_000

    def add(self, message_key: str) -> None:
        self.keys[message_key] = None
        while len(self.keys) > self.limit:
            del self.keys[next(iter(self.keys))]

    def __contains__(self, message_key: object) -> bool:
        return message_key in self.keys

    def clear(self) -> None:
        self.keys.clear()


# --- the probe -----------------------------------------------------------------------


@dataclass(frozen=True)
class AssistantTurn:
    index: int  # position in ``messages``
    state: State
    tool_calls: int


@dataclass(frozen=True)
class ChatContinuity:
    turns: tuple[AssistantTurn, ...] = ()

    def count(self, state: State) -> int:
        return sum(1 for turn in self.turns if turn.state == state)

    @property
    def restored(self) -> int:
        return self.count("exact") + self.count("wrong")

    def state_at(self, index: int) -> State | None:
        return next((t.state for t in self.turns if t.index == index), None)

    def summary(self) -> str:
        return (
            f"continuity: restored={self.restored} exact={self.count('exact')} "
            f"wrong={self.count('wrong')} missing={self.count('missing')}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "restored": self.restored,
            "exact": self.count("exact"),
            "wrong": self.count("wrong"),
            "missing": self.count("missing"),
            "items": [
                {"index": t.index, "state": t.state, "tool_calls": t.tool_calls} for t in self.turns
            ],
        }


Recognize = Callable[[str, str], bool]  # (reasoning_content, assistant_key) -> exact?


def probe_chat(messages: Sequence[Any], recognize: Recognize) -> ChatContinuity:
    turns = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or message.get("role") != "assistant":
            continue
        value = message.get("reasoning_content")
        state: State
        if value is None:
            state = "missing"
        elif isinstance(value, str) and recognize(value, assistant_key(message)):
            state = "exact"
        else:
            state = "wrong"
        calls = message.get("tool_calls")
        turns.append(AssistantTurn(index, state, len(calls) if isinstance(calls, list) else 0))
    return ChatContinuity(tuple(turns))


# --- the rules -----------------------------------------------------------------------


def check_strict(
    messages: Sequence[Any],
    report: ChatContinuity,
    strictness: Strictness,
    *,
    has_tools: bool,
) -> None:
    """Raise the 400 the provider answers under ``strictness``, if any."""
    rule = strictness.rule
    if rule == "off":
        return
    if rule == "legacy_rejects":
        for index, message in enumerate(messages):
            if isinstance(message, Mapping) and message.get("reasoning_content") is not None:
                raise rejection(strictness, index)
        return
    for turn in report.turns:
        required = turn.tool_calls > 0 or (rule == "all_turns_with_tools" and has_tools)
        if required and turn.state != "exact":
            raise rejection(strictness, turn.index)


def rejection(strictness: Strictness, index: int) -> ApiError:
    template = {
        "tool_turns_indexed": INDEXED_MESSAGE,
        "kimi": KIMI_MESSAGE,
        "legacy_rejects": LEGACY_MESSAGE,
    }.get(strictness.rule, DEEPSEEK_MESSAGE)
    message = template.format(index=index)
    return ApiError(400, PREFIX + message if strictness.prefix else message)
