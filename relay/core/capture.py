"""Capture one generation's original output and decide its fate (design §4).

Two sides are collected separately while a response is relayed:

- :class:`OutputCapture` gets every upstream Responses event, decoded
  (:mod:`relay.core.responses_events`; the relay always streams upstream, JSON answers
  included) and keeps the finalized original items: each
  ``output_item.done`` item and the terminal response's ``output``;
- :class:`~relay.core.projection.ClientProjection` gets every Chat chunk produced for
  the client (or the JSON completion) and keeps what the client was told.

:func:`finish_capture` then decides, conservatively:

==========  ==========================================================================
``poison``  the output at this position is unknown (no envelope): ``INCOMPLETE_RESPONSE``
            (no terminal event, failed / incomplete / ``error``, capture or projection
            over ``max_bytes``, malformed or non-serializable upstream data),
            ``CIPHERTEXT_MISMATCH`` (done vs completed items differ beyond the accepted
            ciphertext difference, or one side has items the other lacks),
            ``PROJECTION_MISMATCH`` (the original items do not project to what was sent),
            ``REFUSAL`` / ``UNKNOWN_PREDICTION`` (the client's next envelope cannot be
            predicted in every spelling a client may send back, see ``predict``).
``observe`` envelope known, block not replayable: ``UNSUPPORTED_OUTPUT`` (item types other
            than reasoning / assistant ``output_text`` message / function_call /
            custom_tool_call, or a reasoning item with nothing after it),
            ``NO_REASONING`` (no reasoning item, or one without nonempty
            ``encrypted_content``), ``EMPTY_ENVELOPE``.
``admit``   everything above holds: the completed ``output`` is the replay block.
==========  ==========================================================================

Pure: no I/O, clock or randomness. Bad upstream data never raises here; it poisons.
Nothing here puts text or ciphertext into a message.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

from relay.core.predict import SentToolCall, predict_envelopes
from relay.core.projection import DEFAULT_MAX_BYTES, ClientProjection, utf8_length
from relay.core.receipts import Reason
from relay.core.responses_events import (
    TERMINAL_EVENTS,
    ErrorEvent,
    Malformed,
    OutputItemDone,
    ResponseCompleted,
    ResponseFailed,
    ResponseIncomplete,
    ResponsesEvent,
)
from relay.errors import RelayError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "PAYLOAD_DOMAIN",
    "CaptureResult",
    "ClientProjection",
    "OutputCapture",
    "finish_capture",
    "payload_digests",
]

PAYLOAD_DOMAIN: Final = b"rrr/payload/v1\0"
# What the capture reads: a malformed one of these poisons (any other is ignored, as the
# stream converter ignores what it does not read).
_READ: Final = TERMINAL_EVENTS | {OutputItemDone.type}
# Whatever json.dumps or a malformed value can throw at us; each means "not known exactly".
_BAD_DATA: Final = (ValueError, TypeError, RecursionError)

# The JSON Chat answer a completed output makes, built by the very code that builds the
# client's answer (``relay.translate.responses_to_chat.project_output``; raises RelayError
# when the items make none). Injected: the core sits below the translation.
Projector = Callable[[list[dict[str, Any]]], Mapping[str, Any]]


def payload_digests(payload: bytes) -> tuple[str, str]:
    """``(payload_fingerprint, output_hash)`` of a payload's stored bytes: what a record
    names it by (domain-separated) and the plain hash the planner checks its bytes with."""
    return (
        hashlib.sha256(PAYLOAD_DOMAIN + payload).hexdigest(),
        hashlib.sha256(payload).hexdigest(),
    )


@dataclass(frozen=True)
class CaptureResult:
    """The decision for one generation. ``envelopes`` is None exactly when poisoned; the
    payload fields are set for ``admit`` and ``observe`` (an observation still needs a
    payload fingerprint to detect conflicts)."""

    kind: Literal["admit", "observe", "poison"]
    reason: Reason | None  # None only for admit
    # Normalized, predicted from what the client was sent: each spelling a client may send
    # back (the respelled arguments first, then the arguments as sent when they differ).
    envelopes: tuple[dict[str, Any], ...] | None
    output: tuple[dict[str, Any], ...] | None  # the completed response's items, as received
    output_json: str | None  # compact JSON of ``list(output)``: the stored payload bytes
    payload_fingerprint: str | None  # sha256(PAYLOAD_DOMAIN + output_json) hex
    output_hash: str | None  # sha256(output_json) hex
    snapshot: str | None  # the terminal response's ``model``

    @property
    def envelope(self) -> dict[str, Any] | None:
        """The first predicted envelope (arguments respelled), None when poisoned."""
        return None if self.envelopes is None else self.envelopes[0]


@dataclass(frozen=True)
class _Finalized:
    """A finalized item reduced to what the done-vs-completed check compares."""

    rest: str  # canonical JSON of the item, a reasoning item's encrypted_content left out
    ciphertext: Any  # a reasoning item's encrypted_content (None: absent, null, or no reasoning)
    item_id: Any

    @property
    def size(self) -> int:
        cipher = self.ciphertext if isinstance(self.ciphertext, str) else ""
        return utf8_length(self.rest) + utf8_length(cipher)


def _canonical(value: Any) -> str:
    # sort_keys: key order is not a difference (deployments insert encrypted_content late);
    # JSON text, unlike ==, tells 1, 1.0 and true apart.
    return json.dumps(
        value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False
    )


def _finalized(item: dict[str, Any]) -> _Finalized:
    """Raises one of ``_BAD_DATA`` on values that are not plain JSON."""
    reasoning = item.get("type") == "reasoning"
    rest = {k: v for k, v in item.items() if not (reasoning and k == "encrypted_content")}
    cipher = item.get("encrypted_content") if reasoning else None
    return _Finalized(_canonical(rest), cipher, item.get("id"))


def _same_item(done: _Finalized, final: _Finalized) -> bool:
    """Equal in every field, except that a reasoning item's completed ciphertext wins."""
    if done.rest != final.rest:
        return False
    a, b = done.ciphertext, final.ciphertext
    if a is None:
        return True  # some deployments fill encrypted_content only on response.completed
    if type(a) is not str or type(b) is not str:
        return False
    # Different bytes are accepted only for two nonempty tokens of one identified item.
    return a == b or bool(a and b and isinstance(done.item_id, str) and done.item_id)


class OutputCapture:
    """The original finalized items of one generation, bounded by ``max_bytes``.

    Finalized ``output_item.done`` items and the terminal ``output`` each count against
    ``max_bytes`` (UTF-8 bytes of their JSON); over it the capture is *exhausted*: held
    items are dropped and the result is poison (``INCOMPLETE_RESPONSE``, design §4 "capture
    exhaustion poisons the position"; :attr:`exhausted` tells it apart for logs).
    """

    def __init__(self, *, project: Projector, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._project = project
        self._max_bytes = max_bytes
        self._done: dict[int, _Finalized] = {}  # output_index → finalized item
        self._done_bytes = 0
        self._conflict = False  # two different done items at one output_index
        self._terminal: str | None = None
        self._completed = False
        self._output: list[dict[str, Any]] | None = None
        self._output_json: str | None = None
        self.snapshot: str | None = None
        self.malformed = False
        self.exhausted = False

    @property
    def finished(self) -> bool:
        """Whether a terminal event was seen."""
        return self._terminal is not None

    def feed(self, event: ResponsesEvent) -> None:
        """One decoded upstream event, as given to the stream converter."""
        if self._terminal is not None:
            return  # the converter ignores anything after the terminal event too
        if isinstance(event, OutputItemDone):
            self._item_done(event)
        elif isinstance(event, ResponseCompleted | ResponseIncomplete | ResponseFailed):
            self._finish(event.type, event.response)
        elif isinstance(event, ErrorEvent):
            self._terminal = event.type
            self._done.clear()  # poisoned: free the items now
        elif isinstance(event, Malformed) and event.type in _READ:
            # A done item or a terminal response the relay cannot read: not known exactly.
            self.malformed = True
            if event.type in TERMINAL_EVENTS:
                self._terminal = event.type

    def _item_done(self, event: OutputItemDone) -> None:
        if self.exhausted:
            return
        index, item = event.output_index, event.item
        if index < 0:
            self.malformed = True
            return
        try:
            finalized = _finalized(item)
        except _BAD_DATA:
            self.malformed = True
            return
        self._done_bytes += finalized.size
        if self._done_bytes > self._max_bytes:
            self._exhaust()
            return
        if self._done.setdefault(index, finalized) != finalized:
            self._conflict = True

    def _finish(self, event_type: str, response: Any) -> None:
        self._terminal = event_type
        if not isinstance(response, dict):
            self.malformed = True
            return
        model = response.get("model")
        self.snapshot = model if isinstance(model, str) else None
        # Only a completed response is known output; incomplete for any reason is not.
        status = response.get("status")
        self._completed = event_type == "response.completed" and status == "completed"
        if not self._completed or self.exhausted:
            self._done.clear()  # poison either way: free the items now
            return
        output = response.get("output")
        if not isinstance(output, list) or not all(isinstance(item, dict) for item in output):
            self.malformed = True
            return
        try:
            text = json.dumps(output, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
            size = len(text.encode("utf-8"))  # raises on a lone surrogate: not storable
        except (*_BAD_DATA, UnicodeEncodeError):
            self.malformed = True
            return
        if size > self._max_bytes:
            self._exhaust()
            return
        self._output, self._output_json = output, text

    def _exhaust(self) -> None:
        self.exhausted = True
        self._done.clear()
        self._output = self._output_json = None

    def _authoritative(self) -> Reason | tuple[list[dict[str, Any]], str]:
        """The completed output and its JSON, or why it is not known exactly."""
        if self.exhausted:
            return Reason.CAPTURE_EXHAUSTED
        if self.malformed or not self._completed:
            return Reason.INCOMPLETE_RESPONSE
        if self._output is None or self._output_json is None:
            return Reason.INCOMPLETE_RESPONSE
        output = self._output
        # The stream must have finalized every completed item, and nothing else.
        if self._conflict or self._done.keys() != set(range(len(output))):
            return Reason.CIPHERTEXT_MISMATCH
        for index, done in self._done.items():
            try:
                final = _finalized(output[index])
            except _BAD_DATA:
                return Reason.INCOMPLETE_RESPONSE
            if not _same_item(done, final):
                return Reason.CIPHERTEXT_MISMATCH
        return output, self._output_json


def _projects_to(
    output: list[dict[str, Any]], sent: ClientProjection, project: Projector
) -> tuple[SentToolCall, ...] | None:
    """The original items' tool calls when they give the client exactly what it was sent,
    else None.

    The items go through the very code that builds the JSON answer (``project``), so
    "several message items in one choice" and call order are decided in one place. They
    are projected with custom tool calls in the custom form, which keeps their kind; a
    custom call the client got in the function form (``RELAY_CUSTOM_TOOL_CALLS=function``)
    is the same call.
    """
    try:
        completion = project(output)
    except RelayError:
        return None
    original = ClientProjection.from_completion(completion, max_bytes=None)
    if not original.known:
        return None
    if (original.text, original.refusal) != (sent.text, sent.refusal):
        return None
    calls = original.tool_calls
    if len(calls) != len(sent.tool_calls) or not all(
        _same_call(made, got) for made, got in zip(calls, sent.tool_calls, strict=True)
    ):
        return None
    # No finish reason yet is fine: the decision is committed before terminal frames go out.
    return calls if sent.finish_reason in (None, original.finish_reason) else None


def _same_call(made: SentToolCall, got: SentToolCall) -> bool:
    """Equal, but for a custom call sent in the function form (kind function)."""
    return made == got or (made.kind == "custom" and replace(made, kind="function") == got)


def _is_supported(item: dict[str, Any]) -> bool:
    kind = item.get("type")
    if kind in ("reasoning", "function_call", "custom_tool_call"):
        return True
    content = item.get("content")
    return (
        kind == "message"
        and item.get("role") == "assistant"
        and isinstance(content, list)
        and all(isinstance(part, dict) and part.get("type") == "output_text" for part in content)
    )


def _has_ciphertext(item: dict[str, Any]) -> bool:
    token = item.get("encrypted_content")
    return isinstance(token, str) and bool(token)


def _observation_reason(output: list[dict[str, Any]], envelope: dict[str, Any]) -> Reason | None:
    if not all(_is_supported(item) for item in output):
        return Reason.UNSUPPORTED_OUTPUT
    reasoning = [item for item in output if item.get("type") == "reasoning"]
    # A reasoning item without its ciphertext cannot be sent back under store:false (404).
    if not reasoning or not all(_has_ciphertext(item) for item in reasoning):
        return Reason.NO_REASONING
    if envelope.get("content") == "" and not envelope.get("tool_calls"):
        return Reason.EMPTY_ENVELOPE
    if output[-1].get("type") == "reasoning":
        # Upstream rejects a reasoning item "provided without its required following item".
        return Reason.UNSUPPORTED_OUTPUT
    return None


def finish_capture(capture: OutputCapture, sent: ClientProjection) -> CaptureResult:
    """Admit, observe or poison one finished generation (see the module docstring).

    Feed ``sent`` every chunk produced for the terminal event (catch-up text and the finish
    chunk) before calling this.
    """

    def poison(reason: Reason) -> CaptureResult:
        return CaptureResult("poison", reason, None, None, None, None, None, capture.snapshot)

    original = capture._authoritative()
    if isinstance(original, Reason):
        return poison(original)
    output, output_json = original
    if sent.exhausted:
        return poison(Reason.CAPTURE_EXHAUSTED)
    calls = _projects_to(output, sent, capture._project)
    if calls is None:
        return poison(Reason.PROJECTION_MISMATCH)
    # The original's calls: what was sent, with each custom call's kind whatever its form.
    envelopes = predict_envelopes(sent.text, calls, sent.refusal) if sent.known else None
    if envelopes is None:
        # A refusal is its own code: how a client echoes one back is unknown (predict.py).
        return poison(Reason.REFUSAL if sent.refusal is not None else Reason.UNKNOWN_PREDICTION)
    payload_fingerprint, output_hash = payload_digests(output_json.encode("utf-8"))
    # The spellings differ only in argument strings: the reason is the same for each.
    reason = _observation_reason(output, envelopes[0])
    return CaptureResult(
        kind="admit" if reason is None else "observe",
        reason=reason,
        envelopes=envelopes,
        output=tuple(output),
        output_json=output_json,
        payload_fingerprint=payload_fingerprint,
        output_hash=output_hash,
        snapshot=capture.snapshot,
    )
