"""What the client was actually sent for one response: assistant text, refusal, tool calls.

The capture side's view of the Chat output (design §4: "the actual converted client frames
or JSON object"). It reads chunks the way a client accumulates them and refuses to guess:
anything a client could read more than one way makes the projection not :attr:`known`
(an unknown prediction, never a guessed match). Pure; never raises on odd shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeGuard

from relay.core.predict import SentToolCall

DEFAULT_MAX_BYTES: Final = 4 * 1024 * 1024  # the entry/capture allowance (design §9)

# Delta fields outside the assistant envelope: Chat clients keep them apart from content.
_IGNORED: Final = frozenset({"role", "reasoning_content", "annotations"})


def _is_mapping(value: Any) -> TypeGuard[Mapping[str, Any]]:
    # The relay's own chunks are dicts: checked first, before the slower ABC check.
    return type(value) is dict or isinstance(value, Mapping)


def utf8_length(text: str) -> int:
    """UTF-8 bytes of ``text``, counting a lone surrogate as its three bytes."""
    return len(text.encode("utf-8", "surrogatepass"))


@dataclass
class _CallParts:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)  # a custom call's input pieces
    kind: str | None = None  # "function" | "custom", from its first typed delta


class ClientProjection:
    """Accumulates Chat chunks (or one completion) as a client would.

    Feed every chunk produced, including those for the terminal event, before deciding.
    More than ``max_bytes`` of text, refusal, ids, names and arguments (UTF-8) makes it
    :attr:`exhausted` and it stops accumulating; ``max_bytes=None`` is unbounded.
    """

    def __init__(self, *, max_bytes: int | None = DEFAULT_MAX_BYTES) -> None:
        self._max_bytes = max_bytes
        self._bytes = 0
        self._text: list[str] = []
        self._refusal: list[str] | None = None
        self._calls: dict[int, _CallParts] = {}  # Chat tool-call index → parts
        self._finish_reason: str | None = None
        self._ambiguous = False
        self.exhausted = False

    @classmethod
    def from_completion(
        cls, completion: Mapping[str, Any], *, max_bytes: int | None = DEFAULT_MAX_BYTES
    ) -> ClientProjection:
        """The projection of a non-streaming ``chat.completion`` answer."""
        projection = cls(max_bytes=max_bytes)
        choices = completion.get("choices")
        choice = choices[0] if isinstance(choices, list) and len(choices) == 1 else None
        message = choice.get("message") if isinstance(choice, Mapping) else None
        if not isinstance(choice, Mapping) or not isinstance(message, Mapping):
            projection._ambiguous = True
            return projection
        delta = dict(message)
        calls = message.get("tool_calls")
        if isinstance(calls, list):  # a message's calls carry no index: their position is it
            delta["tool_calls"] = [
                {**call, "index": i} if isinstance(call, Mapping) else call
                for i, call in enumerate(calls)
            ]
        projection._choice({**choice, "delta": delta})
        return projection

    def feed_chunk(self, chunk: Mapping[str, Any]) -> None:
        """One ``chat.completion.chunk`` as emitted (a usage chunk has no choices)."""
        choices = chunk.get("choices")
        if type(choices) is not list and not isinstance(choices, list):
            self._ambiguous = True
            return
        for choice in choices:
            self._choice(choice)

    # --- what was sent ----------------------------------------------------------------

    @property
    def text(self) -> str:
        return "".join(self._text)

    @property
    def refusal(self) -> str | None:
        return None if self._refusal is None else "".join(self._refusal)

    @property
    def tool_calls(self) -> tuple[SentToolCall, ...]:
        """The calls in index order (a missing id or name reads as ``""``; see ``known``).
        A call sent in the custom form has ``kind`` custom; in the function form, function
        (whatever the upstream made: the capture compares with the original items)."""
        return tuple(
            SentToolCall(
                parts.id or "", parts.name or "", "".join(parts.arguments), parts.kind or "function"
            )
            for _, parts in sorted(self._calls.items())
        )

    @property
    def finish_reason(self) -> str | None:
        return self._finish_reason

    @property
    def known(self) -> bool:
        """Whether a client can read what was sent only one way."""
        indexes_dense = sorted(self._calls) == list(range(len(self._calls)))
        calls_whole = all(p.id is not None and p.name is not None for p in self._calls.values())
        return not (self._ambiguous or self.exhausted) and indexes_dense and calls_whole

    # --- accumulation -----------------------------------------------------------------

    def _choice(self, choice: Any) -> None:
        if not _is_mapping(choice):
            self._ambiguous = True
            return
        index, delta = choice.get("index"), choice.get("delta")
        if type(index) is not int or index != 0 or not _is_mapping(delta):
            self._ambiguous = True  # only choice 0 exists in what the relay sends
            return
        for key, value in delta.items():
            if value is None or key in _IGNORED:
                continue
            if key == "content":
                self._add(self._text, value)
            elif key == "refusal":
                self._refusal = [] if self._refusal is None else self._refusal
                self._add(self._refusal, value)
            elif key == "tool_calls" and isinstance(value, list):
                for call in value:
                    self._call(call)
            else:
                self._ambiguous = True  # a field whose effect on the envelope is unknown
        if delta.get("role") not in (None, "assistant"):
            self._ambiguous = True
        reason = choice.get("finish_reason")
        if isinstance(reason, str):
            self._finish_reason = reason
        elif reason is not None:
            self._ambiguous = True

    def _call(self, call: Any) -> None:
        if not _is_mapping(call):
            self._ambiguous = True
            return
        index, kind = call.get("index"), call.get("type")
        # A custom call (the Chat API's form) carries its name and input pieces in "custom".
        custom = kind == "custom" or (kind is None and "custom" in call)
        field_name, piece_key = ("custom", "input") if custom else ("function", "arguments")
        function = call.get(field_name, {})
        if type(index) is not int or not _is_mapping(function):
            self._ambiguous = True
            return
        parts = self._calls.setdefault(index, _CallParts())
        if kind not in (None, "function", "custom") or ("function" in call and "custom" in call):
            self._ambiguous = True
        this_kind = "custom" if custom else "function"
        if kind is not None or custom:
            if parts.kind not in (None, this_kind):
                self._ambiguous = True  # one call, two kinds
            parts.kind = this_kind
        elif parts.kind == "custom":
            self._ambiguous = True  # function pieces for a custom call
        # A second id or name for one call: clients differ (SDKs concatenate, others replace).
        for attribute, value in (("id", call.get("id")), ("name", function.get("name"))):
            if value is None:
                continue
            if getattr(parts, attribute) is not None or not isinstance(value, str):
                self._ambiguous = True
            elif self._counted(value):
                setattr(parts, attribute, value)
        arguments = function.get(piece_key)
        if arguments is not None:
            self._add(parts.arguments, arguments)

    def _add(self, pieces: list[str], value: Any) -> None:
        if type(value) is not str and not isinstance(value, str):
            self._ambiguous = True
        elif self._counted(value):
            pieces.append(value)

    def _counted(self, piece: str) -> bool:
        """Charge ``piece`` to the allowance; False (and everything dropped) when over."""
        if self.exhausted:
            return False
        self._bytes += utf8_length(piece)
        if self._max_bytes is not None and self._bytes > self._max_bytes:
            self.exhausted = True
            self._text, self._refusal, self._calls = [], None, {}
            return False
        return True
