"""Verdicts of the chain checks that read stored rows only, remembered across plans
(design §21).

Cursor sends the whole conversation again every turn: turn N+1's plan is turn N's chain
plus one block. Of the checks the planner runs on a chain, three depend on nothing but
the chain's rows and its payloads' item ids: every link (each parent is the last block
of the plan its child recorded, re-derived by chain digest), strictly increasing
positions, and no item id twice. Their verdict for a chain is kept here, keyed by the
chain's :class:`~relay.core.records.Observation` objects themselves and each block's item
keys.

An entry serves a plan only when the rows read in that plan's transaction are *the same
objects* (``is``, member by member): the stores build an ``Observation`` from a row once
and hand back that object only for a row equal in every column and each column's type
(:mod:`relay.storage.observations`), and an ``Observation`` is immutable, so the same
object means the same inputs; and when each block's item keys, as verified from the
bytes read in that plan, equal the remembered ones. Then the verdict is exactly what
re-deriving it would give. Everything else is checked in every plan as before: each row
and payload is read in the dispatch transaction, each payload's bytes compared (hot) or
verified, the links and order of any member the entry does not cover, identity against
the visible history, generation, replayability, intents, markers, snapshot, later
records, retention, call pairing and the byte budget.

An entry also names the chain's members, so the next plan of the conversation reads its
ancestors by id in one indexed query rather than walking the links in a recursive one
(:meth:`relay.core.planner.RecordSource.observations_by_id`); rows read so are the rows the
walk would read, and the walk still reads any it does not find.

Bounded by entry count, least recently used out; an entry holds references to rows and
item keys only (no payload text). Losing one changes no verdict: the chain is checked in
full again.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final, NamedTuple

from relay.core.records import Observation

# Chains remembered: a few conversations' newest plans each (an entry is a tuple of row
# references and item keys: tens of KB for a 256-block chain).
PLAN_MEMO_ENTRIES: Final = 64


class ChainVerdict(NamedTuple):
    """A chain whose links, order and item ids passed, as it was read then."""

    chain: tuple[Observation, ...]  # oldest first; the last is the chain's head
    item_keys: tuple[tuple[tuple[str, str], ...], ...]  # each member's, in chain order
    keys: frozenset[tuple[str, str]]  # all of them (no key twice)

    def proves(self, chain: list[Observation]) -> int:
        """How many of ``chain``'s members, from the oldest, this verdict covers: all of
        them when ``chain`` is this very chain, all but the head when ``chain`` is this
        chain plus one block (read as the same objects), else none."""
        known = self.chain
        if len(chain) == len(known) or len(chain) == len(known) + 1:
            for mine, theirs in zip(known, chain, strict=False):
                if mine is not theirs:
                    return 0
            return len(known)
        return 0


class PlanMemo:
    """Chain verdicts by their head's observation id, least recently used first out."""

    def __init__(self, entries: int = PLAN_MEMO_ENTRIES) -> None:
        self.entries = entries
        self.hits = 0  # plans whose chain (or all of it but the head) an entry covered
        self._verdicts: OrderedDict[int, ChainVerdict] = OrderedDict()

    def __len__(self) -> int:
        return len(self._verdicts)

    def get(self, head_id: int) -> ChainVerdict | None:
        verdict = self._verdicts.get(head_id)
        if verdict is not None:
            self._verdicts.move_to_end(head_id)
        return verdict

    def put(self, verdict: ChainVerdict) -> None:
        head_id = verdict.chain[-1].id
        self._verdicts[head_id] = verdict
        self._verdicts.move_to_end(head_id)
        while len(self._verdicts) > self.entries:
            self._verdicts.popitem(last=False)
