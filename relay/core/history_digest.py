"""Prefix digests of a scoped visible history (design §2), pure.

Framing (every length a u64 big-endian count of canonical UTF-8 bytes), continuing the
history hash state its :class:`~relay.core.scope.Scope` started:

- history state      = SHA-256(``rrr/history/v1\\0`` || len || scope || len || m0 || len || m1 ...)
- ``boundaries[k]``  = the history state's digest after ``k`` messages (``[0]``: scope only)
- envelope fingerprint = SHA-256(``rrr/envelope/v1\\0`` || len || normalized envelope),
  independent of position and scope (tag ``rrr/envelope-without-reasoning-content/v1\\0``
  when ``reasoning_content`` is excluded)

Messages are hashed in their normalized form (see ``envelope``). All limits are decided by
measuring the whole scope and history before any message is emitted; a refusal raises
:class:`~relay.core.canonical.CanonicalRefused` and means: skip caching, no intent,
no marker.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from relay.core.assistant_render import render_assistant
from relay.core.canonical import (
    FRAMING,
    Budget,
    CanonicalLimitExceeded,
    Fanout,
    append_framed,
    frame,
)
from relay.core.envelope import is_assistant, normalize_assistant, normalize_message
from relay.core.limits import CanonicalLimits
from relay.core.rendered_messages import RenderedMessages, message_key
from relay.core.scope import Hasher, Scope

ENVELOPE_TAGS: Final = (b"rrr/envelope/v1\0", b"rrr/envelope-without-reasoning-content/v1\0")


class AssistantBlockKey(NamedTuple):
    """Where an assistant envelope sits: matching uses ``end_digest``, then verifies the
    start boundary and the envelope fingerprint. (A named tuple: a history makes one per
    assistant message, and a frozen dataclass costs several times as much to build.)"""

    position: int  # index of the assistant message in the history
    start_digest: str  # boundary before it
    end_digest: str  # boundary after it
    envelope_fingerprint: str


# AssistantBlockKey(...) without the Python-level __new__ a named tuple's call goes through.
_new_block: Final = tuple.__new__


@dataclass(frozen=True)
class HistoryState:
    """The hash state after ``position`` messages; capture extends it with the predicted
    envelope of the response it is collecting."""

    position: int
    digest: str
    bytes_used: int
    nodes_used: int
    limits: CanonicalLimits
    exclude_reasoning_content: bool
    _hasher: Hasher = field(repr=False, compare=False)

    def extend(self, envelope: Mapping[str, Any]) -> tuple[AssistantBlockKey, HistoryState]:
        """Append one assistant envelope (normalized here): its block key and the new state.

        Raises ``CanonicalRefused`` when the longer history would break a limit (then no
        later request can carry it within the limits either).
        """
        if not is_assistant(envelope):
            raise ValueError("only an assistant envelope can extend a history")
        if self.position + 1 > self.limits.max_messages:
            raise CanonicalLimitExceeded("messages")
        flag = self.exclude_reasoning_content
        normalized = normalize_assistant(envelope, exclude_reasoning_content=flag)
        budget = Budget(self.limits, bytes_used=self.bytes_used, nodes_used=self.nodes_used)
        size = budget.measure(normalized)
        hasher = self._hasher.copy()
        envelope_hash = hashlib.sha256(ENVELOPE_TAGS[flag])
        frame(Fanout((hasher, envelope_hash)), normalized, size)
        digest = hasher.hexdigest()
        key = AssistantBlockKey(self.position, self.digest, digest, envelope_hash.hexdigest())
        state = HistoryState(
            self.position + 1, digest, budget.bytes, budget.nodes, self.limits, flag, hasher
        )
        return key, state


@dataclass(frozen=True)
class HistoryDigests:
    """Prefix digests of one scoped visible history."""

    scope_digest: str
    boundaries: tuple[str, ...]  # len(history) + 1 hex digests; [k] = after k messages
    message_sizes: tuple[int, ...]  # canonical bytes of each normalized message
    assistant_blocks: tuple[AssistantBlockKey, ...]  # in history order
    bytes_used: int  # canonical bytes of scope + history
    nodes_used: int
    final_state: HistoryState = field(repr=False, compare=False)
    # tool_call_id -> position of the first tool message answering it (for the planner's
    # call pairing: gathered here because this is the one pass over every message)
    first_answers: Mapping[str, int] = field(default_factory=dict, repr=False)


def history_digests(
    scope: Scope,
    messages: Sequence[Any],
    *,
    exclude_reasoning_content: bool = False,
    memo: RenderedMessages | None = None,
) -> HistoryDigests:
    """Digest every prefix of a visible history (Chat messages, as the client sent them).

    Everything is measured before anything is emitted: over a limit (or not canonical),
    this raises ``CanonicalRefused`` having hashed nothing. Measuring renders each
    document that fits one chunk (the one-pass renderers, :meth:`Budget.render_text`)
    into one buffer of framed texts, so emitting is hashing slices of it.

    ``memo``: renderings remembered from earlier calls (:mod:`relay.core.rendered_messages`);
    a message found there is charged its remembered size and nodes instead of being
    rendered again (when that breaks a limit, it is rendered for the exact refusal), and
    every message rendered whole is remembered. The result is the same with or without.
    """
    limits = scope.limits
    if len(messages) > limits.max_messages:
        raise CanonicalLimitExceeded("messages")
    flag = exclude_reasoning_content
    budget = Budget(limits, bytes_used=scope.canonical_size, nodes_used=scope.nodes)
    sizes: list[int] = []
    # The framed renderings, back to back: one buffer, not one object per message.
    rendered_history = bytearray()
    ends: list[int] = []  # end offset of each message's framing in rendered_history
    streamed: dict[int, object] = {}  # position -> normalized value too long to render
    assistants: list[bool] = []
    first_answers: dict[str, int] = {}
    # The memo's renderings (None: no memo), bound to these limits and this flag.
    recall = memo.entries(limits, flag).recall if memo is not None else None
    envelope_start = hashlib.sha256(ENVELOPE_TAGS[flag])
    # position -> an assistant message's envelope fingerprint, known from the memo (or
    # computed once to be remembered): the hashing pass below skips its second hash
    envelopes: dict[int, str] = {}
    size: int | None
    for position, message in enumerate(messages):
        is_dict = type(message) is dict
        role = message.get("role") if is_dict else None
        assistant = role == "assistant"  # is_assistant
        if role == "tool" and isinstance(call_id := message.get("tool_call_id"), str):
            first_answers.setdefault(call_id, position)
        remembered = None  # the message's memo key, when it has one
        if recall is not None and is_dict and (remembered := message_key(message)) is not None:
            found = recall(remembered)
            # The memo is bound to the limits, so the message's depth fits them: only the
            # totals may differ from when it was remembered. Over them, it is rendered
            # again below for the exact refusal.
            if found is not None and budget.admit(len(found[0]) - FRAMING, found[1], 0):
                if assistant:
                    envelopes[position] = found[3]
                rendered_history += found[0]
                sizes.append(len(found[0]) - FRAMING)
                ends.append(len(rendered_history))
                assistants.append(assistant)
                continue
        nodes_before = budget.nodes
        if assistant:
            size = render_assistant(message, flag, budget, rendered_history)
        elif is_dict:
            size = append_framed(rendered_history, budget.render_flat(message))
        else:
            size = None
        if size is None:  # outside the one-pass shapes: measured, then rendered or streamed
            value = normalize_message(message, exclude_reasoning_content=flag)
            size, text = budget.render_text(value)
            if text is None:
                streamed[position] = value
            else:
                append_framed(rendered_history, text)
        if remembered is not None and position not in streamed:
            assert memo is not None
            framed = bytes(rendered_history[len(rendered_history) - FRAMING - size :])
            envelope: str | None = None
            if assistant:
                fingerprint = envelope_start.copy()
                fingerprint.update(framed)
                envelope = envelopes[position] = fingerprint.hexdigest()
            if not memo.remember(remembered, framed, budget.nodes - nodes_before, envelope):
                recall = None  # no room: the rest of this history goes without the memo
        sizes.append(size)
        ends.append(len(rendered_history))  # unchanged: streamed (a framing is >= 8 bytes)
        assistants.append(assistant)

    hasher = scope.history_start(exclude_reasoning_content=flag)
    digest = hasher.hexdigest()
    boundaries = [digest]
    blocks: list[AssistantBlockKey] = []
    view = memoryview(rendered_history)
    start = 0
    for position, (end, assistant) in enumerate(zip(ends, assistants, strict=True)):
        previous = digest
        known = envelopes.get(position) if assistant else None
        envelope_hash = envelope_start.copy() if assistant and known is None else None
        if end != start:  # rendered: its framing, emitted once into both
            piece = view[start:end]
            hasher.update(piece)
            if envelope_hash is not None:
                envelope_hash.update(piece)
            start = end
        elif envelope_hash is not None:  # streamed: emitted once, into both
            frame(Fanout((hasher, envelope_hash)), streamed[position], sizes[position])
        else:
            frame(hasher, streamed[position], sizes[position])
        digest = hasher.hexdigest()
        boundaries.append(digest)
        if envelope_hash is not None:
            known = envelope_hash.hexdigest()
        if known is not None:  # an assistant message
            blocks.append(_new_block(AssistantBlockKey, (position, previous, digest, known)))
    view.release()
    final = HistoryState(
        len(sizes), boundaries[-1], budget.bytes, budget.nodes, limits, flag, hasher.copy()
    )
    return HistoryDigests(
        scope.digest, tuple(boundaries), tuple(sizes), tuple(blocks), budget.bytes,
        budget.nodes, final, first_answers,
    )  # fmt: skip
