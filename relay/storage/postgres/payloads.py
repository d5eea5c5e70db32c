"""The ``payloads`` table on the shared store: an admitted observation's original output
as its stored UTF-8 bytes (``bytea``) and its idle-retention clock (``touched_at``), with
:mod:`relay.storage.payloads`'s rules."""

from __future__ import annotations

from collections.abc import Iterable

from relay.core.records import (
    TOUCH_GRANULARITY_S,
    OversizedPayload,
    StoredPayload,
)
from relay.storage.payloads import one_payload
from relay.storage.postgres.connections import Conn
from relay.storage.postgres.database import Database


class Payloads:
    def __init__(self, db: Database) -> None:
        self._db = db

    def load_payload(self, observation_id: int, *, max_bytes: int) -> StoredPayload | None:
        loaded = self.load_payloads([observation_id], max_bytes=max_bytes)
        return one_payload(loaded, observation_id)

    def load_payloads(
        self, observation_ids: Iterable[int], *, max_bytes: int
    ) -> dict[int, StoredPayload | OversizedPayload]:
        """Like the SQLite store's: decided on the size column, so oversize bytes are never
        loaded, and measured again after loading."""
        loaded: dict[int, StoredPayload | OversizedPayload] = {}
        wanted = list(dict.fromkeys(observation_ids))
        if not wanted:
            return loaded
        with self._db.read("load payloads") as conn:
            rows = conn.execute(
                "SELECT observation_id, size, touched_at, "
                "CASE WHEN size <= %s THEN output_json END FROM payloads "
                "WHERE observation_id = ANY(%s)",
                (max_bytes, wanted),
            )
            for observation_id, size, touched_at, text in rows:
                data = None if text is None else bytes(text)
                actual = size if data is None else len(data)
                if data is None or actual > max_bytes:
                    loaded[observation_id] = OversizedPayload(observation_id, actual, max_bytes)
                else:
                    loaded[observation_id] = StoredPayload(observation_id, data, actual, touched_at)
        return loaded

    def put_payload(self, observation_id: int, output_json: str, now: float) -> None:
        data = output_json.encode("utf-8")
        with self._db.write("store a payload") as conn:
            conn.execute(
                "INSERT INTO payloads (observation_id, output_json, size, touched_at) "
                "VALUES (%s, %s, %s, %s)",
                (observation_id, data, len(data), now),
            )

    def touch_payloads(self, observation_ids: Iterable[int], now: float) -> None:
        """Forward only, and not within the granularity (as the SQLite store)."""
        wanted = list(dict.fromkeys(observation_ids))
        if not wanted:
            return
        with self._db.write("touch payloads") as conn:
            conn.execute(
                "UPDATE payloads SET touched_at = %s "
                "WHERE observation_id = ANY(%s) AND touched_at < %s",
                (now, wanted, now - TOUCH_GRANULARITY_S),
            )


def has_retained_descendant(conn: Conn, observation_id: int) -> bool:
    """Whether a record generated on top of this one still keeps its payload (one walk
    down the parent links, as :func:`relay.storage.cleanup.has_retained_descendant`)."""
    row = conn.execute(
        "WITH RECURSIVE below (id) AS ("
        " SELECT id FROM observations WHERE parent_id = %s"
        " UNION SELECT o.id FROM observations o JOIN below ON o.parent_id = below.id)"
        " SELECT EXISTS (SELECT 1 FROM below JOIN payloads p ON p.observation_id = below.id)",
        (observation_id,),
    ).fetchone()
    return bool(row and row[0])
