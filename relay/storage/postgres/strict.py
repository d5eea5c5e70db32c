"""The strict-provider records on the shared store: :mod:`relay.storage.strict_store`'s
semantics (records by end digest or tool-call id, digests checked by readers, sliding
expiry that never moves back, the administration API), in PostgreSQL when it is
selected, so every relay restores what any of them recorded."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import psycopg

from relay.storage.strict_store import (
    StrictEntry,
    StrictPage,
    StrictStats,
    StrictTally,
    page_cursor,
    page_of,
    text_digest,
)

Conn = psycopg.Connection[tuple[Any, ...]]
Access = Callable[[str], AbstractContextManager[Conn]]
Transaction = Callable[[], AbstractContextManager[None]]

_COLUMNS = """id, scope_digest, end_digest, provider, model, reasoning, text_digest,
    chars, created_at, touched_at, expires_at"""


class PgStrictEntries:
    def __init__(self, read: Access, write: Access, transaction: Transaction) -> None:
        self._read = read
        self._write = write
        self._transaction = transaction

    def put(
        self, *, scope_digest: str, end_digest: str | None, tool_call_ids: Sequence[str],
        provider: str, model: str, reasoning: str, now: float, expires_at: float,
    ) -> StrictEntry:  # fmt: skip
        digest = text_digest(reasoning)
        ids = list(dict.fromkeys(tool_call_ids))
        with self._transaction(), self._write("store strict reasoning") as conn:
            previous = [
                row[0]
                for row in conn.execute(
                    "SELECT entry_id FROM strict_tool_calls WHERE scope_digest = %s "
                    "AND tool_call_id = ANY(%s)",
                    (scope_digest, ids),
                )
            ]
            if end_digest is not None:
                conn.execute(
                    "DELETE FROM strict_entries WHERE scope_digest = %s AND end_digest = %s",
                    (scope_digest, end_digest),
                )
            row = conn.execute(
                "INSERT INTO strict_entries (scope_digest, end_digest, provider, model, "
                "reasoning, text_digest, chars, created_at, touched_at, expires_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                (scope_digest, end_digest, provider, model, reasoning, digest,
                 len(reasoning), now, now, expires_at),
            ).fetchone()  # fmt: skip
            assert row is not None
            entry_id = int(row[0])
            with conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO strict_tool_calls (scope_digest, tool_call_id, entry_id, "
                    "ordinal) VALUES (%s, %s, %s, %s) ON CONFLICT (scope_digest, tool_call_id) "
                    "DO UPDATE SET entry_id = excluded.entry_id, ordinal = excluded.ordinal",
                    [(scope_digest, call_id, entry_id, n) for n, call_id in enumerate(ids)],
                )
            if previous:
                conn.execute(
                    "DELETE FROM strict_entries WHERE end_digest IS NULL AND id = ANY(%s) "
                    "AND NOT EXISTS (SELECT 1 FROM strict_tool_calls "
                    "WHERE entry_id = strict_entries.id)",
                    (previous,),
                )
        return StrictEntry(
            entry_id, scope_digest, end_digest, provider, model, reasoning, digest,
            len(reasoning), now, now, expires_at, tuple(ids),
        )  # fmt: skip

    def by_end(self, scope_digest: str, end_digest: str) -> StrictEntry | None:
        found = self._select("scope_digest = %s AND end_digest = %s", (scope_digest, end_digest))
        return found[0] if found else None

    def by_tool_call(self, scope_digest: str, call_id: str) -> StrictEntry | None:
        found = self._select(
            "id = (SELECT entry_id FROM strict_tool_calls WHERE scope_digest = %s "
            "AND tool_call_id = %s)",
            (scope_digest, call_id),
        )
        return found[0] if found else None

    def get(self, entry_id: int) -> StrictEntry | None:
        found = self._select("id = %s", (entry_id,))
        return found[0] if found else None

    def touch(self, entry_ids: Iterable[int], *, now: float, expires_at: float) -> None:
        ids = list(dict.fromkeys(entry_ids))
        if not ids:
            return
        with self._transaction(), self._write("touch strict reasoning") as conn:
            conn.execute(
                "UPDATE strict_entries SET touched_at = greatest(touched_at, %s), "
                "expires_at = greatest(expires_at, %s) WHERE id = ANY(%s)",
                (now, expires_at, ids),
            )

    def delete_expired(self, now: float) -> int:
        with self._transaction(), self._write("remove expired strict reasoning") as conn:
            return conn.execute(
                "DELETE FROM strict_entries WHERE expires_at <= %s", (now,)
            ).rowcount

    def page(
        self,
        *,
        provider: str | None = None,
        model: str | None = None,
        limit: int = 50,
        before_id: int | None = None,
    ) -> StrictPage:
        before_id = page_cursor(limit, before_id)
        clauses: list[str] = []
        params: list[object] = []
        for clause, value in (("provider = %s", provider), ("model = %s", model),
                              ("id < %s", before_id)):  # fmt: skip
            if value is not None:
                clauses.append(clause)
                params.append(value)
        found = self._select(" AND ".join(clauses) or "TRUE", params, limit=limit + 1)
        return page_of(found, limit)

    def stats(self, now: float) -> StrictStats:
        with self._read("count strict reasoning") as conn:
            row = conn.execute(
                "SELECT count(*), coalesce(sum(chars), 0), "
                "count(*) FILTER (WHERE expires_at <= %s), min(created_at), max(created_at) "
                "FROM strict_entries",
                (now,),
            ).fetchone()
            assert row is not None
            by: dict[str, dict[str, StrictTally]] = {}
            for column in ("provider", "model"):  # constants: never client input
                rows = conn.execute(
                    f"SELECT {column}, count(*), sum(chars) FROM strict_entries "  # noqa: S608
                    f"GROUP BY {column} ORDER BY {column}".encode()
                )
                by[column] = {name: StrictTally(int(n), int(c)) for name, n, c in rows}
        count, chars, expired, oldest, newest = row
        return StrictStats(
            int(count), int(chars), int(expired), by["provider"], by["model"], oldest, newest
        )

    def delete(self, entry_id: int) -> bool:
        return self._delete("id = %s", (entry_id,)) > 0

    def delete_all(self) -> int:
        return self._delete("TRUE", ())

    def delete_provider(self, provider: str) -> int:
        return self._delete("provider = %s", (provider,))

    def delete_tool_call(self, call_id: str) -> int:
        return self._delete(
            "id IN (SELECT entry_id FROM strict_tool_calls WHERE tool_call_id = %s)", (call_id,)
        )

    def _delete(self, where: str, params: Sequence[object]) -> int:
        with self._transaction(), self._write("delete strict reasoning") as conn:
            sql = f"DELETE FROM strict_entries WHERE {where}"  # noqa: S608 - constant clauses
            return conn.execute(sql.encode(), params).rowcount

    def _select(
        self, where: str, params: Sequence[object], *, limit: int | None = None
    ) -> list[StrictEntry]:
        sql = f"SELECT {_COLUMNS} FROM strict_entries WHERE {where} ORDER BY id DESC"  # noqa: S608
        if limit is not None:
            sql, params = sql + " LIMIT %s", (*params, limit)
        with self._read("read strict reasoning") as conn:
            rows = conn.execute(sql.encode(), params).fetchall()
            calls: dict[int, list[str]] = {row[0]: [] for row in rows}
            if calls:
                for entry_id, call_id in conn.execute(
                    "SELECT entry_id, tool_call_id FROM strict_tool_calls "
                    "WHERE entry_id = ANY(%s) ORDER BY entry_id, ordinal",
                    (list(calls),),
                ):
                    calls[entry_id].append(call_id)
        return [_entry(row, calls[row[0]]) for row in rows]


def _entry(row: Sequence[Any], call_ids: Sequence[str]) -> StrictEntry:
    (id_, scope_digest, end_digest, provider, model, reasoning, digest, chars, created_at,
     touched_at, expires_at) = row  # fmt: skip
    return StrictEntry(
        id_, scope_digest, end_digest, provider, model, reasoning, digest, chars, created_at,
        touched_at, expires_at, tuple(call_ids),
    )  # fmt: skip
