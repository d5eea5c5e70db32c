"""The ``meta`` table: small stored facts (the cache secret, ``coverage-gap``, ...)."""

from __future__ import annotations

from relay.storage.database import Database


class Meta:
    def __init__(self, db: Database) -> None:
        self._db = db

    def meta(self, key: str) -> str | int | float | bytes | None:
        """A small stored fact (e.g. ``coverage-gap``); ``None`` when unset."""
        with self._db.read("read metadata") as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str | int | float | None) -> None:
        """Set (``None``: delete) a stored fact; the secret cannot be changed."""
        if key == "secret":
            raise ValueError("the cache secret is created once and never replaced")
        with self._db.write("write metadata") as conn:
            if value is None:
                conn.execute("DELETE FROM meta WHERE key = ?", (key,))
            else:
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES (?, ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (key, value),
                )
