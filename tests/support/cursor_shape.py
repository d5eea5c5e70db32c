"""A Cursor chat for the history tests: the bodies of ``tests.support.cursor_client``
with the rest of Cursor's field set (``scenarios.cursor_steps``: ``truncation``, the
prompt cache fields, ``text``), each answer echoed back as an assistant ``output_text``
item, screenshots as ``input_image`` parts, and the fake's continuity line read back."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from scenarios.cursor_steps import CURSOR_FIELDS, assistant_item
from tests.support.cursor_client import Turn, cursor_body, turn
from tests.support.stack import Stack

CONTINUITY = re.compile(r"continuity: replayed=(\d+) intact=(\d+) misplaced=(\d+)")


def continuity(answer: Turn) -> tuple[int, int, int]:
    """(replayed, intact, misplaced) as the fake's probe reported them in the answer."""
    match = CONTINUITY.search(answer.text)
    assert match, answer.text
    replayed, intact, misplaced = (int(g) for g in match.groups())
    return replayed, intact, misplaced


def full_cursor_body(items: list[dict[str, Any]], *, stream: bool) -> dict[str, Any]:
    body = cursor_body(items, stream=stream)
    body.update({k: v for k, v in CURSOR_FIELDS.items() if k not in body and k != "stream_options"})
    return body


@dataclass
class Conversation:
    """One Cursor chat: its items grow by each answer and the next user turn."""

    items: list[dict[str, Any]] = field(default_factory=list)

    def body(self, *, stream: bool) -> dict[str, Any]:
        return full_cursor_body(list(self.items), stream=stream)

    def turn(self, stack: Stack, user: dict[str, Any], *, stream: bool = True) -> Turn:
        """Send the next user item; the answer is echoed into the history."""
        self.items.append(user)
        answer = turn(stack, self.body(stream=stream))
        self.items.append(assistant_item(answer.text))
        return answer
