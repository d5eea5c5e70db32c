"""Payload reclamation (design §6 Retention): the only code that deletes replay-cache rows.

Reached as ``ReasoningStore.cleanup``; it shares the store's connection, error translation
and transactions (like :mod:`relay.storage.strict_store`). One run is one transaction.

Only ``payloads`` rows are deleted. Observations, markers and dependency rows are the
safety ledger and are kept forever: a position's ambiguity or poison never becomes
reusable when its data goes, and a record without its payload simply stops replaying
(``payload_missing``). The same transaction sets the record's ``reclaimed_at`` (schema
v6), so ``relay cache verify`` can tell a reclaimed payload from a lost one.

A payload is *eligible* when it has been idle longer than the retention window
(``touched_at < cutoff``, the same test by which the planner already refuses it as
``record_expired``, so deleting it changes no replay decision). The caller decides the
cutoff and whether deletion may happen at all (:mod:`relay.core.deletion_barrier`). An
eligible payload is still kept while any of these holds:

- **pinned**: an open intent depends on it (a ``dependencies`` row held by an intent: a
  dispatched plan selected it) or is the intent that produced it;
- **competitor**: another record generated at the same position of the same conversation
  (same scope and start digest: a regeneration, or the other spelling of the same answer)
  keeps a payload that is not eligible: while one answer at a position is in use, its
  siblings stay, so a client may switch between them;
- **descendant**: a record generated on top of it still keeps its payload
  (:func:`has_retained_descendant`): ancestors always outlive their descendants, because
  a descendant replays only with its whole chain.

Descendants go first: candidates are visited by position, highest first (a descendant's
position is always above each of its ancestors'), so a chain idle as a whole is reclaimed
from its newest block down, within one run when it fits. At most ``limit`` payloads go
per run, and at most ``scan`` candidates are examined.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from relay.storage.database import Access, Transaction

MAX_RECLAIMED_PER_RUN: Final = 100
MAX_SCANNED_PER_RUN: Final = 1000


@dataclass(frozen=True)
class CleanupResult:
    """What one run did (counts only: safe to log)."""

    reclaimed: int = 0  # payload rows deleted
    reclaimed_bytes: int = 0  # their stored size
    examined: int = 0  # eligible candidates looked at
    pinned: int = 0  # kept: an open intent depends on it
    competitor: int = 0  # kept: a sibling at its position is still in use
    descendant: int = 0  # kept: a record built on it keeps its payload
    capped: bool = False  # stopped at the per-run limit: more may be eligible


def has_retained_descendant(conn: sqlite3.Connection, observation_id: int) -> bool:
    """Whether a record generated on top of this one (a child, a child's child, ...)
    still keeps its payload.

    The one place that reads ancestry for cleanup: one indexed walk down the parent links
    (``observations_by_parent``). Observation rows are never deleted, so the links stay
    whole even where a payload between has been reclaimed."""
    row = conn.execute(
        "WITH RECURSIVE below (id) AS ("
        " SELECT id FROM observations WHERE parent_id = ?"
        " UNION SELECT o.id FROM observations o JOIN below ON o.parent_id = below.id)"
        " SELECT EXISTS (SELECT 1 FROM below JOIN payloads p ON p.observation_id = below.id)",
        (observation_id,),
    ).fetchone()
    return bool(row[0])


def _pinned(conn: sqlite3.Connection, observation_id: int, producer: str | None) -> bool:
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM dependencies WHERE ancestor_id = ? "
        "AND intent_id IS NOT NULL) OR EXISTS (SELECT 1 FROM intents WHERE id = ?)",
        (observation_id, producer),
    ).fetchone()
    return bool(row[0])


def _competitor_in_use(
    conn: sqlite3.Connection, observation_id: int, scope_id: int, start: str, cutoff: float
) -> bool:
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM observations o "
        "JOIN payloads p ON p.observation_id = o.id "
        "WHERE o.scope_id = ? AND o.start_digest = ? AND o.id != ? AND p.touched_at >= ?)",
        (scope_id, start, observation_id, cutoff),
    ).fetchone()
    return bool(row[0])


class PayloadCleanup:
    """``ReasoningStore.cleanup``: reclaim idle payloads, one transaction per run."""

    def __init__(
        self, access: Access, writer: Access, transaction: Transaction, wall: Callable[[], float]
    ) -> None:
        self._access = access
        self._writer = writer
        self._transaction = transaction
        self._wall = wall  # the store's clock: when a payload was reclaimed

    def eligible(self, cutoff: float) -> int:
        """How many payloads are idle past ``cutoff`` (blocked or not), for diagnostics."""
        with self._access("count payloads") as conn:
            row = conn.execute(
                "SELECT count(*) FROM payloads WHERE touched_at < ?", (cutoff,)
            ).fetchone()
        return int(row[0])

    def reclaim(
        self,
        cutoff: float,
        *,
        limit: int = MAX_RECLAIMED_PER_RUN,
        scan: int = MAX_SCANNED_PER_RUN,
        now: float | None = None,
    ) -> CleanupResult:
        """Delete up to ``limit`` eligible, unblocked payloads, descendants first, and mark
        each record reclaimed at ``now`` (default: the store's wall clock)."""
        reclaimed_at = self._wall() if now is None else now
        reclaimed = reclaimed_bytes = examined = pinned = competitor = descendant = 0
        capped = False
        with self._transaction(), self._writer("reclaim payloads") as conn:
            candidates = conn.execute(
                "SELECT p.observation_id, p.size, o.scope_id, o.start_digest, o.intent_id "
                "FROM payloads p JOIN observations o ON o.id = p.observation_id "
                "WHERE p.touched_at < ? ORDER BY o.position DESC, o.id DESC LIMIT ?",
                (cutoff, scan),
            ).fetchall()
            for observation_id, size, scope_id, start, producer in candidates:
                if reclaimed == limit:
                    capped = True
                    break
                examined += 1
                if _pinned(conn, observation_id, producer):
                    pinned += 1
                elif _competitor_in_use(conn, observation_id, scope_id, start, cutoff):
                    competitor += 1
                elif has_retained_descendant(conn, observation_id):
                    descendant += 1
                else:
                    conn.execute("DELETE FROM payloads WHERE observation_id = ?", (observation_id,))
                    conn.execute(
                        "UPDATE observations SET reclaimed_at = ? WHERE id = ?",
                        (reclaimed_at, observation_id),
                    )
                    reclaimed += 1
                    reclaimed_bytes += size
            capped = capped or len(candidates) == scan
        return CleanupResult(
            reclaimed, reclaimed_bytes, examined, pinned, competitor, descendant, capped
        )
