"""Collect a Chat answer's reasoning and the assistant message the client will send back. Pure.

:class:`ChatCapture` takes either the streamed ``chat.completion.chunk`` objects (as the
client is sent them) or one ``chat.completion``, and keeps per choice: the
``reasoning_content`` (or a provider's ``reasoning`` spelling), the ``content`` text, a
``refusal`` and the tool calls (id and name from their first delta, arguments joined).
Everything collected is bounded by ``max_bytes``; past it the capture is *exhausted* and
yields nothing (a partial reasoning must never be restored).

:func:`capture_key` says where a captured turn is found later: the end digest of the
history extended with the predicted envelope (:func:`~relay.core.predict.predict_envelope`,
tool arguments as the client re-serializes them; ``None`` when the prediction is unknown or
over the canonical limits) and its tool-call ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from relay.core.canonical import CanonicalRefused
from relay.core.history_digest import HistoryState
from relay.core.predict import SentToolCall, predict_envelope
from relay.core.receipts import Reason


@dataclass(frozen=True)
class CapturedTurn:
    """One choice's assistant message as the client received it, with its reasoning."""

    index: int
    reasoning: str
    content: str
    refusal: str | None
    tool_calls: tuple[SentToolCall, ...]
    calls_complete: bool  # every call had an id and a name

    @property
    def tool_call_ids(self) -> tuple[str, ...]:
        return tuple(call.id for call in self.tool_calls if call.id)

    def envelope(self) -> dict[str, Any] | None:
        """The normalized envelope the client will send back, or ``None`` when unknown."""
        if not self.calls_complete:
            return None
        return predict_envelope(self.content, self.tool_calls, self.refusal)


@dataclass(frozen=True)
class CaptureKey:
    end_digest: str | None
    tool_call_ids: tuple[str, ...]
    reason: Reason | None  # why there is no end digest


def capture_key(state: HistoryState | None, turn: CapturedTurn) -> CaptureKey:
    """Where ``turn`` will be looked up: after the request's history ``state`` (``None``:
    the history had no identity)."""
    ids = turn.tool_call_ids
    if state is None:
        return CaptureKey(None, ids, Reason.CANONICAL_LIMIT)
    envelope = turn.envelope()
    if envelope is None:
        return CaptureKey(None, ids, Reason.UNKNOWN_PREDICTION)
    try:
        key, _ = state.extend(envelope)
    except CanonicalRefused:
        return CaptureKey(None, ids, Reason.CANONICAL_LIMIT)
    return CaptureKey(key.end_digest, ids, None)


def reasoning_of(part: Mapping[str, Any]) -> str | None:
    """``reasoning_content``, or the ``reasoning`` string some providers send instead."""
    for name in ("reasoning_content", "reasoning"):
        value = part.get(name)
        if isinstance(value, str):
            return value
    return None


@dataclass
class _Call:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


@dataclass
class _Choice:
    reasoning: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    refusal: list[str] | None = None
    calls: dict[int, _Call] = field(default_factory=dict)


class ChatCapture:
    def __init__(self, *, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._used = 0
        self._choices: dict[int, _Choice] = {}
        self.exhausted = False

    def feed_chunk(self, chunk: Mapping[str, Any]) -> None:
        """One ``chat.completion.chunk``."""
        for index, delta in _parts(chunk, "delta"):
            self._add(index, delta, streamed=True)

    def feed_completion(self, completion: Mapping[str, Any]) -> None:
        """A whole ``chat.completion``."""
        for index, message in _parts(completion, "message"):
            self._add(index, message, streamed=False)

    def turns(self) -> list[CapturedTurn]:
        """Every choice seen, by index; ``[]`` once exhausted."""
        if self.exhausted:
            return []
        return [self._turn(index, choice) for index, choice in sorted(self._choices.items())]

    # --- internals ---------------------------------------------------------------------

    def _add(self, index: int, part: Mapping[str, Any], *, streamed: bool) -> None:
        if self.exhausted:
            return
        choice = self._choices.setdefault(index, _Choice())
        reasoning = reasoning_of(part)
        if reasoning:
            self._keep(choice.reasoning, reasoning)
        content = part.get("content")
        if isinstance(content, str) and content:
            self._keep(choice.content, content)
        refusal = part.get("refusal")
        if isinstance(refusal, str):
            if choice.refusal is None:
                choice.refusal = []
            self._keep(choice.refusal, refusal)
        calls = part.get("tool_calls")
        for position, call in enumerate(calls if isinstance(calls, list) else []):
            if isinstance(call, Mapping):
                self._add_call(choice, call, position, streamed=streamed)

    def _add_call(
        self, choice: _Choice, call: Mapping[str, Any], position: int, *, streamed: bool
    ) -> None:
        index = call.get("index") if streamed else position
        if not isinstance(index, int) or isinstance(index, bool):
            index = position
        slot = choice.calls.setdefault(index, _Call())
        call_id = call.get("id")
        if isinstance(call_id, str) and call_id and slot.id is None:
            slot.id = call_id
            self._charge(call_id)
        function = call.get("function")
        if not isinstance(function, Mapping):
            return
        name = function.get("name")
        if isinstance(name, str) and name:
            slot.name = name if slot.name is None else slot.name + name
            self._charge(name)
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            self._keep(slot.arguments, arguments)

    def _keep(self, parts: list[str], text: str) -> None:
        self._charge(text)
        if not self.exhausted:
            parts.append(text)

    def _charge(self, text: str) -> None:
        self._used += len(text.encode("utf-8", "surrogatepass"))
        if self._used > self._max_bytes:
            self.exhausted = True
            self._choices.clear()

    @staticmethod
    def _turn(index: int, choice: _Choice) -> CapturedTurn:
        calls = [choice.calls[key] for key in sorted(choice.calls)]
        complete = all(call.id and call.name for call in calls)
        sent = tuple(
            SentToolCall(call.id or "", call.name or "", "".join(call.arguments)) for call in calls
        )
        refusal = None if choice.refusal is None else "".join(choice.refusal)
        return CapturedTurn(
            index,
            "".join(choice.reasoning),
            "".join(choice.content),
            refusal,
            sent,
            complete,
        )


def _parts(value: Mapping[str, Any], key: str) -> list[tuple[int, Mapping[str, Any]]]:
    """``(choice index, delta or message)`` of each well-formed choice."""
    choices = value.get("choices")
    found = []
    for position, choice in enumerate(choices if isinstance(choices, list) else []):
        if not isinstance(choice, Mapping) or not isinstance(choice.get(key), Mapping):
            continue
        index = choice.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            index = position
        found.append((index, choice[key]))
    return found
