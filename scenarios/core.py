"""The DSL's building blocks: steps, placeholders, matchers and the run context.

A step is either an :class:`Action` (``scenario >> action``: something happens) or an
:class:`Expectation` (``scenario << expectation``: something must have happened). Both
get the :class:`Ctx` of the run. Placeholders capture values produced along the way
(a response id, a tool call id, a ciphertext digest) the first time they are matched and
must match the same value afterwards, as in mitmproxy's Playbook.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scenarios.answer import ChatAnswer
from scenarios.client import RelayConnection
from scenarios.fakeapi import is_model_call
from scenarios.faults.clock import FakeClock
from scenarios.faults.disk import TmpfsMount
from scenarios.runner import Harness
from scenarios.seed import Seed


class ExpectationFailed(AssertionError):
    """An expectation did not hold; the message says what was expected and what was seen."""


class Step:
    """Base of actions and expectations; ``describe`` is one transcript line."""

    def describe(self) -> str:
        fields = ", ".join(
            f"{k}={short(v)}" for k, v in vars(self).items() if v not in (None, (), {}, [])
        )
        return f"{type(self).__name__}({fields})"


def short(value: object, limit: int = 60) -> str:
    """A repr that keeps transcripts one screen wide (bodies can be megabytes)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 12]}...<{len(text)} chars>"


class Action(Step):
    def run(self, ctx: Ctx) -> None:
        raise NotImplementedError


class Expectation(Step):
    def check(self, ctx: Ctx) -> None:
        raise NotImplementedError


# --- placeholders and matchers ------------------------------------------------------------


class Placeholder:
    """A value captured on first match, compared on every later one."""

    _unset = object()

    def __init__(self, name: str) -> None:
        self.name = name
        self._value: Any = Placeholder._unset

    @property
    def bound(self) -> bool:
        return self._value is not Placeholder._unset

    @property
    def value(self) -> Any:
        if not self.bound:
            raise ExpectationFailed(f"placeholder {self.name} used before it captured a value")
        return self._value

    def bind(self, value: Any) -> None:
        self._value = value

    def __repr__(self) -> str:
        return f"<{self.name}={self._value!r}>" if self.bound else f"<{self.name}>"


@dataclass(frozen=True)
class Contains:
    needle: str


@dataclass(frozen=True)
class Matches:
    pattern: str


@dataclass(frozen=True)
class AtLeast:
    minimum: float


@dataclass(frozen=True)
class AtMost:
    maximum: float


@dataclass(frozen=True)
class InRange:
    """``low <= value <= high`` (e.g. ``InRange(400, 499)`` for any client error)."""

    low: float
    high: float


def matches(expected: Any, actual: Any) -> bool:
    """Does ``actual`` satisfy ``expected`` (a value, matcher or placeholder)?"""
    if isinstance(expected, Placeholder):
        if not expected.bound:
            expected.bind(actual)
            return True
        return bool(expected.value == actual)
    if isinstance(expected, Contains):
        return isinstance(actual, str) and expected.needle in actual
    if isinstance(expected, Matches):
        return isinstance(actual, str) and re.search(expected.pattern, actual) is not None
    if isinstance(expected, AtLeast):
        return isinstance(actual, int | float) and actual >= expected.minimum
    if isinstance(expected, AtMost):
        return isinstance(actual, int | float) and actual <= expected.maximum
    if isinstance(expected, InRange):
        return isinstance(actual, int | float) and expected.low <= actual <= expected.high
    return bool(expected == actual)


def resolve(value: Any) -> Any:
    """Replace placeholders inside a request (messages, tool results) by their values."""
    if isinstance(value, Placeholder):
        return value.value
    if isinstance(value, dict):
        return {key: resolve(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [resolve(item) for item in value]
    return value


# --- the run context -------------------------------------------------------------------------


@dataclass
class Turn:
    """One client request and what came of it."""

    name: str
    conversation: str
    body: dict[str, Any]
    upstream_from: int  # fake request count when the turn started
    answer: ChatAnswer | None = None
    conn: RelayConnection | None = None  # an open stream the scenario holds
    upstream_to: int | None = None


@dataclass
class Ctx:
    harness: Harness
    seed: Seed
    clock: FakeClock | None = None
    tmpfs: TmpfsMount | None = None
    fiu_prefix: Path | None = None  # libfiu control FIFO prefix when under libfiu
    conversations: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)  # conversation -> model it uses
    turns: dict[str, Turn] = field(default_factory=dict)
    last_turn: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    _counter: int = 0

    def history_of(self, conversation: str) -> list[dict[str, Any]]:
        return self.conversations.setdefault(conversation, [])

    def next_turn_name(self) -> str:
        with self.lock:
            self._counter += 1
            return f"t{self._counter}"

    def turn(self, name: str | None) -> Turn:
        key = name or self.last_turn
        if key is None or key not in self.turns:
            raise ExpectationFailed(f"no turn named {key!r}; turns so far: {sorted(self.turns)}")
        return self.turns[key]

    def upstream_count(self) -> int:
        assert self.harness.fake is not None
        return len(self.harness.fake.requests())

    def upstream_of(self, turn: Turn) -> list[dict[str, Any]]:
        """The model calls (Responses, or Chat for a provider) made during ``turn`` (for
        the concurrent case: by its text)."""
        assert self.harness.fake is not None
        calls = [
            exchange
            for exchange in self.harness.fake.exchanges()
            if is_model_call(exchange)
            and exchange["index"] >= turn.upstream_from
            and (turn.upstream_to is None or exchange["index"] < turn.upstream_to)
        ]
        if len(calls) > 1:
            wanted = _last_user_text(turn.body.get("messages", []))
            same = [c for c in calls if _last_user_text(_input_as_messages(c["body"])) == wanted]
            calls = same or calls
        return calls


def _last_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _input_as_messages(body: Any) -> list[Any]:
    if not isinstance(body, dict):
        return []
    items = body.get("input", body.get("messages"))
    return items if isinstance(items, list) else []
