"""A Cursor chat for the history tests: the bodies of ``tests.support.cursor_client``
(Cursor's whole field set), each answer echoed back as an assistant ``output_text`` item,
screenshots as ``input_image`` parts, and the fake's continuity line read back."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from scenarios.cursor_steps import assistant_item
from tests.support.cursor_client import Turn, cursor_body, turn
from tests.support.stack import Stack

CONTINUITY = re.compile(r"continuity: replayed=(\d+) intact=(\d+) misplaced=(\d+)")


def continuity(answer: Turn) -> tuple[int, int, int]:
    """(replayed, intact, misplaced) as the fake's probe reported them in the answer."""
    match = CONTINUITY.search(answer.text)
    assert match, answer.text
    replayed, intact, misplaced = (int(g) for g in match.groups())
    return replayed, intact, misplaced


@dataclass
class Conversation:
    """One Cursor chat: its items grow by each answer and the next user turn."""

    items: list[dict[str, Any]] = field(default_factory=list)

    def body(self, *, stream: bool) -> dict[str, Any]:
        return cursor_body(list(self.items), stream=stream)

    def turn(self, stack: Stack, user: dict[str, Any], *, stream: bool = True) -> Turn:
        """Send the next user item; the answer is echoed into the history."""
        self.items.append(user)
        answer = turn(stack, self.body(stream=stream))
        self.items.append(assistant_item(answer.text))
        return answer
