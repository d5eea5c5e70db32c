"""Put original output blocks in place of visible assistant messages (pure).

``spans[k]`` is the half-open range of upstream ``input`` items that visible message ``k``
translated to (``None`` when it became ``instructions``). Each selected assistant message
is replaced exactly once by its block's items (a :class:`RawItems`: their stored text,
spliced in when the body is encoded); every other item (user messages, tool results,
unselected assistant messages) stays exactly as translated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from relay.core.json_bytes import RawItems

Span = tuple[int, int]


def replace_blocks(
    items: Sequence[Any],
    spans: Sequence[Span | None],
    blocks: Mapping[int, RawItems],
) -> list[Any]:
    """A new input list with ``blocks[position]`` in place of that message's items."""
    cuts: list[tuple[int, int, int]] = []  # (start, end, position), in input order
    for position in blocks:
        span = spans[position] if 0 <= position < len(spans) else None
        if span is None:
            raise ValueError(f"visible message {position} has no input items to replace")
        if not 0 <= span[0] <= span[1] <= len(items):
            raise ValueError("a replacement span lies outside the input")
        cuts.append((span[0], span[1], position))
    cuts.sort()
    out: list[Any] = []
    index = 0
    for start, end, position in cuts:
        if start < index:
            raise ValueError("replacement spans overlap")
        out.extend(items[index:start])
        out.append(blocks[position])
        index = end
    out.extend(items[index:])
    return out
