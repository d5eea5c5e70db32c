"""The ``payloads`` table: an admitted observation's original output, read as its stored
UTF-8 bytes, and its idle-retention clock (``touched_at``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from relay.core.records import (
    TOUCH_GRANULARITY_S,
    OversizedPayload,
    StoredPayload,
    StoredSizeExceeded,
)
from relay.storage.database import Database
from relay.storage.schema import in_batches, placeholders


def one_payload(
    loaded: Mapping[int, StoredPayload | OversizedPayload], observation_id: int
) -> StoredPayload | None:
    """``observation_id``'s entry of a :meth:`Payloads.load_payloads` result, as both stores'
    ``load_payload`` give it: ``None`` when none is stored, :class:`StoredSizeExceeded`
    raised for one over the limit."""
    found = loaded.get(observation_id)
    if isinstance(found, OversizedPayload):
        raise StoredSizeExceeded(found.describe())
    return found


class Payloads:
    def __init__(self, db: Database) -> None:
        self._db = db

    def load_payload(self, observation_id: int, *, max_bytes: int) -> StoredPayload | None:
        """The stored payload, or ``None``; raises :class:`StoredSizeExceeded` (see
        :meth:`load_payloads`)."""
        loaded = self.load_payloads([observation_id], max_bytes=max_bytes)
        return one_payload(loaded, observation_id)

    def load_payloads(
        self, observation_ids: Iterable[int], *, max_bytes: int
    ) -> dict[int, StoredPayload | OversizedPayload]:
        """Each stored payload of these observations (absent: none stored), read in a few
        queries, or :class:`OversizedPayload` for one over ``max_bytes`` — decided on the stored
        size column, so oversize text is never loaded. The text comes as its stored UTF-8
        bytes (a cast, not a decode: neither SQLite nor Python converts it, and the
        planner hashes and replays exactly those bytes). The hash is not checked here:
        the planner does, to name the refusal (a damaged row, valid UTF-8 or not, fails
        it)."""
        loaded: dict[int, StoredPayload | OversizedPayload] = {}
        with self._db.read("load payloads") as conn:
            for batch in in_batches(dict.fromkeys(observation_ids)):
                rows = conn.execute(
                    "SELECT observation_id, size, touched_at, "  # noqa: S608
                    "CASE WHEN size <= ? THEN CAST(output_json AS BLOB) END FROM payloads "
                    f"WHERE observation_id IN ({placeholders(len(batch))})",
                    (max_bytes, *batch),
                )
                for observation_id, size, touched_at, text in rows:
                    # Measured after loading too: a wrong size column must not let
                    # larger text through.
                    actual = size if text is None else len(text)
                    if text is None or actual > max_bytes:
                        loaded[observation_id] = OversizedPayload(observation_id, actual, max_bytes)
                    else:
                        loaded[observation_id] = StoredPayload(
                            observation_id, text, actual, touched_at
                        )
        return loaded

    def put_payload(self, observation_id: int, output_json: str, now: float) -> None:
        """Store an admitted observation's original output (once per observation)."""
        size = len(output_json.encode("utf-8"))
        with self._db.write("store a payload") as conn:
            conn.execute(
                "INSERT INTO payloads (observation_id, output_json, size, touched_at) "
                "VALUES (?, ?, ?, ?)",
                (observation_id, output_json, size, now),
            )

    def touch_payloads(self, observation_ids: Iterable[int], now: float) -> None:
        """Renew idle retention: ``touched_at = now`` where the stored value is older than
        ``now - TOUCH_GRANULARITY_S`` (so it only moves forward: a clock that stepped
        backwards never shortens a payload's life), else nothing. A row touched within
        the granularity is not rewritten: no page is dirtied for it (expiry and cleanup
        allow for the lag, see :func:`relay.core.records.idle_window_s`)."""
        stale = now - TOUCH_GRANULARITY_S
        with self._db.write("touch payloads") as conn:
            for batch in in_batches(dict.fromkeys(observation_ids)):
                conn.execute(
                    "UPDATE payloads SET touched_at = ? "  # noqa: S608
                    f"WHERE observation_id IN ({placeholders(len(batch))}) AND touched_at < ?",
                    (now, *batch, stale),
                )
