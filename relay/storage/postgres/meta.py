"""The ``meta`` table on the shared store: small stored facts. The cache secret is not
one of them (``store_secret``, created once at open); a coverage gap is never stored
either: recording it advances every generation at once (design §22, 4)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from relay.storage.postgres.database import Database

COVERAGE_GAP_KEY: Final = "coverage-gap"  # relay.storage.recovery's key


class Meta:
    def __init__(self, db: Database, advance_all: Callable[[], int]) -> None:
        self._db = db
        self._advance_all = advance_all  # every scope's generation, in the caller's transaction

    def meta(self, key: str) -> str | int | float | bytes | None:
        with self._db.read("read metadata") as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = %s", (key,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str | int | float | None) -> None:
        """Set (``None``: delete) a stored fact. A coverage gap is never stored here: the
        other relays are serving now, not at their next start, so recording it advances
        every generation at once, in the caller's transaction (the gap is consumed as it
        is recorded; the next enabled start finds none)."""
        if key == "secret":
            raise ValueError("the cache secret is created once and never replaced")
        if key == COVERAGE_GAP_KEY and value is not None:
            self._advance_all()
            return
        with self._db.write("write metadata") as conn:
            if value is None:
                conn.execute("DELETE FROM meta WHERE key = %s", (key,))
            else:
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES (%s, %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (key, str(value)),
                )
