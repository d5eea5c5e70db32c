"""Putting ``reasoning_content`` back into (or taking it out of) outgoing Chat messages. Pure.

:func:`restore` fills the reasoning of every assistant message the rule says needs it and
that lacks it (absent, ``null`` or ``""``), asking ``lookup`` with the message's history
identity (its end digest, ``None`` when unknown) and its tool-call ids; the lookup decides
the order (identity first, tool-call ids second). A miss follows the rule: ``""`` or
nothing. Messages a client sent with their reasoning are left exactly as sent.

:func:`strip` removes ``reasoning_content`` from every message, for upstreams that do not
accept it (non-strict Chat upstreams such as OpenAI's, and legacy models that reject it).

Changed messages are shallow copies; the input list and its messages are never mutated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from relay.core.envelope import is_assistant
from relay.strict.rules import OnMiss, StrictRule, Turns

FIELD = "reasoning_content"

# (end digest or None, tool-call ids) -> the stored reasoning text, or None
Lookup = Callable[[str | None, tuple[str, ...]], str | None]


@dataclass(frozen=True)
class Restored:
    messages: list[Any]
    hits: int = 0  # messages given their stored reasoning
    misses: int = 0  # messages that needed it and had none stored
    filled_empty: int = 0  # misses given "" (the rule's on_miss)

    @property
    def changed(self) -> bool:
        return self.hits > 0 or self.filled_empty > 0


def tool_call_ids(message: Any) -> tuple[str, ...]:
    """The string ids of an assistant message's tool calls, in order."""
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    if not isinstance(calls, list):
        return ()
    ids = (call.get("id") for call in calls if isinstance(call, dict))
    return tuple(value for value in ids if isinstance(value, str) and value)


def has_tools(body_tools: Any) -> bool:
    """Whether a request's ``tools`` value is a non-empty list."""
    return isinstance(body_tools, list) and len(body_tools) > 0


def needs_reasoning(message: Any, turns: Turns, *, tools_present: bool) -> bool:
    """Whether the rule requires this message to carry its reasoning."""
    if not is_assistant(message) or turns is Turns.REJECTS:
        return False
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        return True
    return turns is Turns.ALL_WITH_TOOLS and tools_present


def lacks_reasoning(message: Any) -> bool:
    value = message.get(FIELD)
    return value is None or value == ""


def restore(
    messages: Sequence[Any],
    rule: StrictRule,
    end_digests: Sequence[str | None],
    lookup: Lookup,
    *,
    tools_present: bool,
) -> Restored:
    """``end_digests[i]`` is message ``i``'s history identity (``None``: not known)."""
    if len(end_digests) != len(messages):
        raise ValueError("one end digest (or None) per message")
    out = list(messages)
    hits = misses = filled = 0
    for position, message in enumerate(messages):
        if not needs_reasoning(message, rule.turns, tools_present=tools_present):
            continue
        if not lacks_reasoning(message):
            continue
        found = lookup(end_digests[position], tool_call_ids(message))
        if found is not None:
            out[position] = {**message, FIELD: found}
            hits += 1
            continue
        misses += 1
        if rule.on_miss is OnMiss.EMPTY and message.get(FIELD) != "":
            out[position] = {**message, FIELD: ""}
            filled += 1
    return Restored(out, hits, misses, filled)


def strip(messages: Sequence[Any]) -> tuple[list[Any], int]:
    """``messages`` without any ``reasoning_content``, and how many carried one."""
    out = []
    stripped = 0
    for message in messages:
        if isinstance(message, dict) and FIELD in message:
            out.append({key: value for key, value in message.items() if key != FIELD})
            stripped += 1
        else:
            out.append(message)
    return out, stripped
