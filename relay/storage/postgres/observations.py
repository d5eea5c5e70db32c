"""The ``observations`` table on the shared store: one row per observed generation, with
its prior plan (:mod:`relay.storage.observations`'s rules; the row builder and the
recordability check are that module's, shared). Every read of a scope's records inside a
transaction comes after its scope's lock (design §22, 2)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from relay.core.records import Observation, PriorPlan
from relay.storage.observations import OBSERVATION_COLUMNS, MalformedPlans, require_recordable
from relay.storage.postgres.database import Database
from relay.storage.postgres.payloads import has_retained_descendant

# A record and its ancestors up the parent links, nearest first (depth 0: the record).
# A link must point to an older row, so a damaged one cannot loop.
_LINEAGE: Final = f"""WITH RECURSIVE walk (wid, depth) AS (
        SELECT %s::bigint, 0
        UNION ALL
        SELECT o.parent_id, walk.depth + 1 FROM walk JOIN observations o ON o.id = walk.wid
        WHERE o.parent_id < o.id AND walk.depth + 1 < %s
    )
    SELECT {OBSERVATION_COLUMNS} FROM walk JOIN observations ON id = wid
    WHERE scope_id = %s ORDER BY depth"""  # noqa: S608


class Observations(MalformedPlans):
    def __init__(self, db: Database) -> None:
        MalformedPlans.__init__(self)
        self._db = db

    def _observations(
        self, scope_id: int | None, where: str, params: Sequence[object], *,
        limit: int | None = None,
    ) -> list[Observation]:  # fmt: skip
        sql = f"SELECT {OBSERVATION_COLUMNS} FROM observations WHERE {where} ORDER BY id DESC"  # noqa: S608
        if limit is not None:
            sql, params = sql + " LIMIT %s", (*params, limit)
        with self._db.read("read observations") as conn:
            if scope_id is not None:
                self._db.lock_scope(conn, scope_id)
            rows = conn.execute(sql.encode(), params).fetchall()
        return [self._observation(row) for row in rows]

    def observation(self, observation_id: int) -> Observation | None:
        found = self._observations(None, "id = %s", (observation_id,), limit=1)
        return found[0] if found else None

    def observations_at(self, scope_id: int, end_digest: str) -> list[Observation]:
        return self._observations(
            scope_id, "scope_id = %s AND end_digest = %s", (scope_id, end_digest)
        )

    def observations_ending_at(
        self, scope_id: int, end_digests: Iterable[str]
    ) -> dict[str, list[Observation]]:
        found: dict[str, list[Observation]] = {}
        wanted = list(dict.fromkeys(end_digests))
        if not wanted:
            return found
        where = "scope_id = %s AND end_digest = ANY(%s)"
        for observation in self._observations(scope_id, where, (scope_id, wanted)):
            found.setdefault(observation.end_digest, []).append(observation)
        return found

    def ends_with_records(self, scope_id: int, end_digests: Iterable[str]) -> set[str]:
        wanted = list(dict.fromkeys(end_digests))
        if not wanted:
            return set()
        with self._db.scoped(scope_id, "read observations") as conn:
            rows = conn.execute(
                "SELECT DISTINCT end_digest FROM observations "
                "WHERE scope_id = %s AND end_digest = ANY(%s)",
                (scope_id, wanted),
            )
            return {row[0] for row in rows}

    def repeats(
        self, scope_id: int, *, generation: int, position: int, start_digest: str,
        end_digest: str, envelope_fingerprint: str, payload_fingerprint: str,
        prior_plan: PriorPlan,
    ) -> list[int]:  # fmt: skip
        with self._db.scoped(scope_id, "read observations") as conn:
            rows = conn.execute(
                "SELECT id FROM observations WHERE scope_id = %s AND end_digest = %s "
                "AND generation = %s AND position = %s AND start_digest = %s "
                "AND envelope_fp = %s AND payload_fp = %s AND prior_chain = %s "
                "AND prior_plan_count = %s",
                (scope_id, end_digest, generation, position, start_digest,
                 envelope_fingerprint, payload_fingerprint, prior_plan.chain, prior_plan.count),
            )  # fmt: skip
            return [row[0] for row in rows]

    def conflicts_at(
        self, scope_id: int, end_digest: str, payload_fingerprint: str, prior_plan: PriorPlan
    ) -> bool:
        with self._db.scoped(scope_id, "read observations") as conn:
            row = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM observations WHERE scope_id = %s "
                "AND end_digest = %s AND (payload_fp != %s OR prior_chain != %s "
                "OR prior_plan_count != %s))",
                (scope_id, end_digest, payload_fingerprint, prior_plan.chain, prior_plan.count),
            ).fetchone()
        return bool(row and row[0])

    def generation_ends(
        self, scope_id: int, start_digest: str, end_digests: Iterable[str]
    ) -> set[str]:
        ends = list(dict.fromkeys(end_digests))
        if not ends:
            return set()
        with self._db.scoped(scope_id, "read observations") as conn:
            rows = conn.execute(
                b"SELECT DISTINCT o.end_digest FROM observations AS o JOIN ("
                b"SELECT DISTINCT intent_id, payload_fp FROM observations "
                b"WHERE scope_id = %s AND start_digest = %s AND end_digest = ANY(%s)) AS g "
                b"ON o.intent_id IS NOT DISTINCT FROM g.intent_id AND o.payload_fp = g.payload_fp "
                b"WHERE o.scope_id = %s AND o.start_digest = %s",
                (scope_id, start_digest, ends, scope_id, start_digest),
            ).fetchall()
        return {row[0] for row in rows}

    def lineage(self, scope_id: int, observation_id: int, limit: int) -> list[Observation]:
        with self._db.scoped(scope_id, "read observations") as conn:
            rows = conn.execute(_LINEAGE.encode(), (observation_id, limit, scope_id)).fetchall()
        return [self._observation(row) for row in rows]

    def observations_by_id(
        self, scope_id: int, observation_ids: Iterable[int]
    ) -> list[Observation]:
        wanted = list(dict.fromkeys(observation_ids))
        if not wanted:
            return []
        return self._observations(scope_id, "id = ANY(%s) AND scope_id = %s", (wanted, scope_id))

    def snapshot_last_seen(self, scope_id: int, snapshot: str) -> float | None:
        with self._db.scoped(scope_id, "read observations") as conn:
            row = conn.execute(
                "SELECT max(observed_at) FROM observations WHERE scope_id = %s AND snapshot = %s",
                (scope_id, snapshot),
            ).fetchone()
        return None if row is None else row[0]

    def add_observation(
        self, *, scope_id: int, generation: int, position: int, start_digest: str,
        end_digest: str, envelope_fingerprint: str, payload_fingerprint: str,
        output_hash: str, prior_plan: PriorPlan, intent_id: str | None,
        snapshot: str | None, replayable: bool, now: float,
    ) -> Observation:  # fmt: skip
        require_recordable(prior_plan)
        with self._db.write("record an observation") as conn:
            self._db.lock_scope(conn, scope_id)
            row = conn.execute(
                "INSERT INTO observations (scope_id, generation, position, start_digest, "
                "end_digest, envelope_fp, payload_fp, output_hash, parent_id, "
                "prior_plan_count, prior_chain, intent_id, snapshot, replayable, "
                "observed_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
                "%s, %s) RETURNING id",
                (scope_id, generation, position, start_digest, end_digest,
                 envelope_fingerprint, payload_fingerprint, output_hash, prior_plan.parent_id,
                 prior_plan.count, prior_plan.chain, intent_id, snapshot, replayable, now),
            ).fetchone()  # fmt: skip
            if snapshot is not None:
                conn.execute(
                    "UPDATE scopes SET latest_snapshot = %s WHERE id = %s", (snapshot, scope_id)
                )
        assert row is not None
        return Observation(
            row[0], scope_id, generation, position, start_digest, end_digest,
            envelope_fingerprint, payload_fingerprint, output_hash, prior_plan,
            intent_id, snapshot, replayable, now,
        )  # fmt: skip

    def children_of(self, observation_id: int) -> list[int]:
        with self._db.read("read observations") as conn:
            rows = conn.execute(
                "SELECT id FROM observations WHERE parent_id = %s ORDER BY id", (observation_id,)
            )
            return [row[0] for row in rows]

    def has_retained_descendant(self, observation_id: int) -> bool:
        with self._db.read("read observations") as conn:
            return has_retained_descendant(conn, observation_id)
