"""The strict-provider tables of the replay store (``strict_entries``, ``strict_tool_calls``).

Reached as ``ReasoningStore.strict``: it shares the store's one connection, its exclusive
lock, its error translation (every ``sqlite3`` error leaves as a
:class:`~relay.errors.StoreError` naming the path and SQLite's code, never a value) and its
transactions. Each mutating method here is one transaction of its own, so it must not be
called inside :meth:`ReasoningStore.transaction`.

A record is one assistant message's ``reasoning_content``: found by ``(scope digest, end
digest)`` (its visible-history identity) or by ``(scope digest, tool-call id)``. Its text
digest (SHA-256 of the UTF-8 text) is stored beside it; readers check
:attr:`StrictEntry.intact` before using the text. Expiry is a wall-clock time that
:meth:`StrictEntries.touch` slides forward, never back; :meth:`StrictEntries.delete_expired`
removes what has passed it.

The listing, statistics and deletions at the end serve the cache's administration API.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from relay.storage.database import Access, Transaction
from relay.storage.schema import in_batches, placeholders

MAX_PAGE: Final = 1000
# SQLite's INTEGER range; a Python int beyond it cannot be bound as a parameter.
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_COLUMNS: Final = """id, scope_digest, end_digest, provider, model, reasoning, text_digest,
    chars, created_at, touched_at, expires_at"""


def text_digest(text: str) -> str:
    """SHA-256 (hex) of the UTF-8 text; ``ValueError`` for text that is not valid Unicode."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("reasoning text with lone surrogates cannot be stored") from None
    return hashlib.sha256(data).hexdigest()


def page_cursor(limit: int, before_id: int | None) -> int | None:
    """Both stores' page arguments checked: ``ValueError`` for a ``limit`` outside 1 to
    :data:`MAX_PAGE`; ``before_id`` brought into the 64-bit id range without changing
    which ids are below it."""
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be from 1 to {MAX_PAGE}")
    if before_id is not None and before_id > _INT64_MAX:
        return None  # every id is below it
    if before_id is not None:
        return max(before_id, _INT64_MIN)  # none is below either
    return None


def page_of(found: Sequence[StrictEntry], limit: int) -> StrictPage:
    """A page from up to ``limit + 1`` records, newest first: the extra one only says that
    more follow, from the last id shown."""
    entries = tuple(found[:limit])
    return StrictPage(entries, entries[-1].id if len(found) > limit else None)


@dataclass(frozen=True)
class StrictEntry:
    id: int
    scope_digest: str
    end_digest: str | None
    provider: str
    model: str
    reasoning: str
    text_digest: str
    chars: int
    created_at: float
    touched_at: float
    expires_at: float
    tool_call_ids: tuple[str, ...]

    @property
    def intact(self) -> bool:
        """Whether the text still matches its stored digest."""
        try:
            return text_digest(self.reasoning) == self.text_digest
        except ValueError:
            return False

    def expired(self, now: float) -> bool:
        return now >= self.expires_at


@dataclass(frozen=True)
class StrictPage:
    entries: tuple[StrictEntry, ...]  # newest first
    next_before_id: int | None  # pass as ``before_id`` for the next page; None: no more


@dataclass(frozen=True)
class StrictTally:
    entries: int
    chars: int


@dataclass(frozen=True)
class StrictStats:
    entries: int
    chars: int
    expired: int  # rows past their expiry that cleanup has not removed yet
    by_provider: dict[str, StrictTally]
    by_model: dict[str, StrictTally]
    oldest_created_at: float | None
    newest_created_at: float | None


def _entry(row: Sequence[Any], call_ids: Sequence[str]) -> StrictEntry:
    (id_, scope_digest, end_digest, provider, model, reasoning, digest, chars, created_at,
     touched_at, expires_at) = row  # fmt: skip
    return StrictEntry(
        id_, scope_digest, end_digest, provider, model, reasoning, digest, chars, created_at,
        touched_at, expires_at, tuple(call_ids),
    )  # fmt: skip


class StrictEntries:
    def __init__(self, read: Access, write: Access, transaction: Transaction) -> None:
        self._read = read
        self._write = write
        self._transaction = transaction

    # --- the restore path --------------------------------------------------------------

    def put(
        self, *, scope_digest: str, end_digest: str | None, tool_call_ids: Sequence[str],
        provider: str, model: str, reasoning: str, now: float, expires_at: float,
    ) -> StrictEntry:  # fmt: skip
        """Store one record. It replaces the record at the same end digest, takes over its
        tool-call ids from older records, and records left with no key are removed."""
        digest = text_digest(reasoning)
        ids = list(dict.fromkeys(tool_call_ids))
        with self._transaction(), self._write("store strict reasoning") as conn:
            previous = self._entry_ids_of_calls(conn, scope_digest, ids)
            if end_digest is not None:
                conn.execute(
                    "DELETE FROM strict_entries WHERE scope_digest = ? AND end_digest = ?",
                    (scope_digest, end_digest),
                )
            cursor = conn.execute(
                "INSERT INTO strict_entries (scope_digest, end_digest, provider, model, "
                "reasoning, text_digest, chars, created_at, touched_at, expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (scope_digest, end_digest, provider, model, reasoning, digest,
                 len(reasoning), now, now, expires_at),
            )  # fmt: skip
            entry_id = cursor.lastrowid
            assert entry_id is not None
            conn.executemany(
                "INSERT OR REPLACE INTO strict_tool_calls (scope_digest, tool_call_id, "
                "entry_id, ordinal) VALUES (?, ?, ?, ?)",
                [(scope_digest, call_id, entry_id, n) for n, call_id in enumerate(ids)],
            )
            for batch in in_batches(sorted(previous)):
                conn.execute(
                    "DELETE FROM strict_entries WHERE end_digest IS NULL "  # noqa: S608
                    f"AND id IN ({placeholders(len(batch))}) AND NOT EXISTS (SELECT 1 FROM "
                    "strict_tool_calls WHERE entry_id = strict_entries.id)",
                    batch,
                )
        return StrictEntry(
            entry_id, scope_digest, end_digest, provider, model, reasoning, digest,
            len(reasoning), now, now, expires_at, tuple(ids),
        )  # fmt: skip

    def by_end(self, scope_digest: str, end_digest: str) -> StrictEntry | None:
        found = self._select("scope_digest = ? AND end_digest = ?", (scope_digest, end_digest))
        return found[0] if found else None

    def by_tool_call(self, scope_digest: str, call_id: str) -> StrictEntry | None:
        found = self._select(
            "id = (SELECT entry_id FROM strict_tool_calls WHERE scope_digest = ? "
            "AND tool_call_id = ?)",
            (scope_digest, call_id),
        )
        return found[0] if found else None

    def get(self, entry_id: int) -> StrictEntry | None:
        found = self._select("id = ?", (entry_id,))
        return found[0] if found else None

    def touch(self, entry_ids: Iterable[int], *, now: float, expires_at: float) -> None:
        """Slide expiry: ``max(old, expires_at)``; a clock stepped back never shortens it."""
        ids = list(dict.fromkeys(entry_ids))
        if not ids:
            return
        with self._transaction(), self._write("touch strict reasoning") as conn:
            for batch in in_batches(ids):
                conn.execute(
                    "UPDATE strict_entries SET touched_at = max(touched_at, ?), "  # noqa: S608
                    f"expires_at = max(expires_at, ?) WHERE id IN ({placeholders(len(batch))})",
                    (now, expires_at, *batch),
                )

    def delete_expired(self, now: float) -> int:
        with self._transaction(), self._write("remove expired strict reasoning") as conn:
            return conn.execute("DELETE FROM strict_entries WHERE expires_at <= ?", (now,)).rowcount

    # --- administration ----------------------------------------------------------------

    def page(
        self,
        *,
        provider: str | None = None,
        model: str | None = None,
        limit: int = 50,
        before_id: int | None = None,
    ) -> StrictPage:
        """Records newest first, optionally of one provider and/or model; ``limit`` from 1
        to :data:`MAX_PAGE`. Keyset pagination: stable while records come and go."""
        before_id = page_cursor(limit, before_id)
        clauses: list[str] = []
        params: list[object] = []
        for clause, value in (("provider = ?", provider), ("model = ?", model),
                              ("id < ?", before_id)):  # fmt: skip
            if value is not None:
                clauses.append(clause)
                params.append(value)
        return page_of(self._select(" AND ".join(clauses) or "1", params, limit=limit + 1), limit)

    def stats(self, now: float) -> StrictStats:
        with self._read("count strict reasoning") as conn:
            count, chars, expired, oldest, newest = conn.execute(
                "SELECT count(*), coalesce(sum(chars), 0), coalesce(sum(expires_at <= ?), 0), "
                "min(created_at), max(created_at) FROM strict_entries",
                (now,),
            ).fetchone()
            by: dict[str, dict[str, StrictTally]] = {}
            for column in ("provider", "model"):  # constants: never client input
                rows = conn.execute(
                    f"SELECT {column}, count(*), sum(chars) FROM strict_entries "  # noqa: S608
                    f"GROUP BY {column} ORDER BY {column}"
                )
                by[column] = {name: StrictTally(n, c) for name, n, c in rows}
        return StrictStats(count, chars, expired, by["provider"], by["model"], oldest, newest)

    def delete(self, entry_id: int) -> bool:
        return self._delete("id = ?", (entry_id,)) > 0

    def delete_all(self) -> int:
        return self._delete("1", ())

    def delete_provider(self, provider: str) -> int:
        return self._delete("provider = ?", (provider,))

    def delete_tool_call(self, call_id: str) -> int:
        """Every record indexed by ``call_id`` (in any scope)."""
        return self._delete(
            "id IN (SELECT entry_id FROM strict_tool_calls WHERE tool_call_id = ?)", (call_id,)
        )

    # --- internals ---------------------------------------------------------------------

    def _delete(self, where: str, params: Sequence[object]) -> int:
        with self._transaction(), self._write("delete strict reasoning") as conn:
            sql = f"DELETE FROM strict_entries WHERE {where}"  # noqa: S608 - constant clauses
            return conn.execute(sql, params).rowcount

    def _select(
        self, where: str, params: Sequence[object], *, limit: int = -1
    ) -> list[StrictEntry]:
        with self._read("read strict reasoning") as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM strict_entries WHERE {where} "  # noqa: S608
                "ORDER BY id DESC LIMIT ?",
                (*params, limit),
            ).fetchall()
            calls: dict[int, list[str]] = {row[0]: [] for row in rows}
            for batch in in_batches(list(calls)):
                for entry_id, call_id in conn.execute(
                    "SELECT entry_id, tool_call_id FROM strict_tool_calls "  # noqa: S608
                    f"WHERE entry_id IN ({placeholders(len(batch))}) ORDER BY entry_id, ordinal",
                    batch,
                ):
                    calls[entry_id].append(call_id)
        return [_entry(row, calls[row[0]]) for row in rows]

    @staticmethod
    def _entry_ids_of_calls(
        conn: sqlite3.Connection, scope_digest: str, call_ids: Sequence[str]
    ) -> set[int]:
        found: set[int] = set()
        for batch in in_batches(call_ids):
            rows = conn.execute(
                "SELECT entry_id FROM strict_tool_calls WHERE scope_digest = ? "  # noqa: S608
                f"AND tool_call_id IN ({placeholders(len(batch))})",
                (scope_digest, *batch),
            )
            found.update(row[0] for row in rows)
        return found
