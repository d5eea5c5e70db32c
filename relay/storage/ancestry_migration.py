"""Schema v5: each record's ancestry becomes one link instead of its whole plan again
(design §6).

Up to v4 an observation kept its prior plan as JSON text (every ancestor's ref, up to 256
of them, 33 KB) and an admitted one a ``dependencies`` row per ancestor: quadratic in a
session's length. From v5 it keeps a link to the plan's last block (``parent_id``), the
plan's length (``prior_plan_count``, as before) and its chain digest (``prior_chain``,
:func:`relay.core.records.plan_chain`); the planner walks the links.

Each record is converted exactly or retired, never guessed:

- its stored plan must be the one spelling of ``prior_plan_count`` descriptors, or the
  record is retired: ``replayable = 0`` and an empty ``prior_chain``, which no plan's
  digest equals (as a damaged plan, it then replays nothing, lies beneath nothing and
  fails a child's link check);
- the link goes to the record the v4 planner resolved the plan's last ref to: the newest
  observation of that scope with that end digest and payload fingerprint. Its chain is
  then checked link by link as the v4 planner checked each ancestor's plan, so the
  decisions are the same. When no record has that ref, or the one that has it is not
  older than the record linking to it (which only a re-observation of identical bytes
  could cause, and which could form a cycle), the link is left empty and the record keeps
  its chain digest: as the newest record of a plan the planner reports
  ``ancestor_missing`` for it, as v4 did, and as a later record it still proves what it
  was generated on wherever its own digest is compared. Only where the planner would have
  to walk through the lost link does it now block an older chain that v4 let through:
  more caution, never less.

The ``dependencies`` rows held by observations are dropped: the links replace them. Intent
pins (rows held by an intent) stay. Open intents get a chain digest and no link: their
plan is never replayed from (startup recovery poisons and removes them).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import orjson

from relay.core.records import RETIRED_CHAIN, BlockRef, is_hex_digest, plan_chain


def legacy_plan_refs(text: object, count: object) -> tuple[BlockRef, ...] | None:
    """The refs of a v4 plan text, or ``None`` unless it is exactly the one spelling v4
    wrote for ``count`` descriptors (compact JSON, ``[["<end>","<payload>"],...]``)."""
    if not isinstance(text, str) or not isinstance(count, int):
        return None
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, list) or len(parsed) != count:
        return None
    refs = []
    for descriptor in parsed:
        if not (
            isinstance(descriptor, list)
            and len(descriptor) == 2
            and all(is_hex_digest(part) for part in descriptor)
        ):
            return None
        refs.append(BlockRef(descriptor[0], descriptor[1]))
    if orjson.dumps(parsed).decode() != text:  # the one spelling, nothing else
        return None
    return tuple(refs)


def link_observations(conn: sqlite3.Connection) -> None:
    """Fill ``parent_id``, ``prior_chain`` (and retire) from the v4 plans, in id order."""
    newest: dict[tuple[int, str, str], int] = {}
    for id_, scope_id, end, payload in conn.execute(
        "SELECT id, scope_id, end_digest, payload_fp FROM observations"
    ):
        key = (scope_id, end, payload)
        newest[key] = max(id_, newest.get(key, id_))
    updates: list[tuple[int | None, str, int]] = []
    retired: list[int] = []
    rows = conn.execute(
        "SELECT id, scope_id, prior_plan, prior_plan_count FROM observations ORDER BY id"
    )
    for id_, scope_id, text, count in rows:
        refs = legacy_plan_refs(text, count)
        if refs is None:
            retired.append(id_)
            continue
        parent = _parent_of(newest, scope_id, refs)
        if parent is not None and parent >= id_:
            parent = None  # a link must point to an older row
        updates.append((parent, plan_chain(refs), id_))
    conn.executemany("UPDATE observations SET parent_id = ?, prior_chain = ? WHERE id = ?", updates)
    conn.executemany(
        "UPDATE observations SET parent_id = NULL, replayable = 0, prior_chain = ? WHERE id = ?",
        [(RETIRED_CHAIN, id_) for id_ in retired],
    )


def _parent_of(
    newest: dict[tuple[int, str, str], int], scope_id: int, refs: Sequence[BlockRef]
) -> int | None:
    if not refs:
        return None
    last = refs[-1]
    return newest.get((scope_id, last.end_digest, last.payload_fingerprint))


def chain_intents(conn: sqlite3.Connection) -> None:
    """Give each open intent the chain digest of its v4 plan (a damaged one: retired)."""
    updates = []
    for id_, text, count in conn.execute("SELECT id, prior_plan, prior_plan_count FROM intents"):
        refs = legacy_plan_refs(text, count)
        updates.append((RETIRED_CHAIN if refs is None else plan_chain(refs), id_))
    conn.executemany("UPDATE intents SET prior_chain = ? WHERE id = ?", updates)


def migrate_to_links(conn: sqlite3.Connection) -> None:
    """The Python part of the v5 step (between its column additions and drops)."""
    link_observations(conn)
    chain_intents(conn)
