"""The ``observations`` table: one row per observed generation, with its prior plan.

A record's prior plan is three small columns (schema v5, design §6): ``parent_id`` (the
observation of the plan's last block), ``prior_plan_count`` and ``prior_chain`` (the
plan's chain digest). A row whose three do not form a plan is returned as stored with
``replayable=False`` (counted in :attr:`Observations.malformed_plans_seen`); the planner
re-derives every link's digest when it walks a chain (:meth:`Observations.lineage`), and a
damaged digest equals no valid plan's. So damage can only ever withhold replay, never
enable it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any, Final, NamedTuple

from relay.core.records import Observation, PriorPlan
from relay.storage.cleanup import has_retained_descendant
from relay.storage.database import Database
from relay.storage.schema import in_batches, placeholders

# SQL built with f-strings interpolates only these constants and "?" placeholder lists.
# The columns :func:`observation_from_row` reads, in Observation's field order (both
# stores select them so).
OBSERVATION_COLUMNS: Final = """id, scope_id, generation, position, start_digest,
    end_digest, envelope_fp, payload_fp, output_hash, parent_id, prior_plan_count,
    prior_chain, intent_id, snapshot, replayable, observed_at"""
# A record and its ancestors up the parent links, nearest first (depth 0: the record).
# A link must point to an older row, so a damaged one cannot loop.
_LINEAGE: Final = f"""WITH RECURSIVE walk (wid, depth) AS (
        SELECT ?, 0
        UNION ALL
        SELECT o.parent_id, walk.depth + 1 FROM walk JOIN observations o ON o.id = walk.wid
        WHERE o.parent_id < o.id AND walk.depth + 1 < ?
    )
    SELECT {OBSERVATION_COLUMNS} FROM walk JOIN observations ON id = wid
    WHERE scope_id = ? ORDER BY depth"""  # noqa: S608
# Rows built into an Observation, remembered by their whole content (design §21): each plan
# of a conversation reads the same chain again, and a row equal in every column is the same
# immutable value, so only the comparison is paid. Bounded, least recently used out.
BUILT_ROWS: Final = 4096


class _Built(NamedTuple):
    row: tuple[Any, ...]  # the row it was built from, every column
    observation: Observation
    well_formed: bool  # its stored plan's, computed once


class MalformedPlans:
    """Both stores' observation gateways: rows become observations through
    :meth:`_observation`, which counts those whose stored plan was malformed."""

    def __init__(self) -> None:
        self._malformed_plans = 0
        self._built: OrderedDict[tuple[Any, tuple[type, ...]], _Built] = OrderedDict()

    @property
    def malformed_plans_seen(self) -> int:
        """Rows read since open whose stored plan was malformed (returned non-replayable)."""
        return self._malformed_plans

    def _observation(self, row: Sequence[Any]) -> Observation:
        # Found by the row's id and each column's type (a damaged row's 1.0 or True must
        # not find the Observation built from a sound row's 1: they compare equal), then
        # compared in every column: hashing an int and types instead of a row's digests.
        values = row if type(row) is tuple else tuple(row)
        key = (values[0], tuple(map(type, values)))
        built = self._built
        entry = built.get(key)
        if entry is None or entry.row != values:
            observation = observation_from_row(values)
            entry = built[key] = _Built(values, observation, observation.prior_plan.well_formed)
            built.move_to_end(key)
            if len(built) > BUILT_ROWS:
                built.popitem(last=False)
        else:
            built.move_to_end(key)
        if not entry.well_formed:
            self._malformed_plans += 1
        return entry.observation


class Observations(MalformedPlans):
    def __init__(self, db: Database) -> None:
        MalformedPlans.__init__(self)
        self._db = db

    def _observations(
        self, where: str, params: Sequence[object], *, limit: int = -1, newest_first: bool = True
    ) -> list[Observation]:
        order = "ORDER BY id DESC " if newest_first else ""
        with self._db.read("read observations") as conn:
            rows = conn.execute(
                f"SELECT {OBSERVATION_COLUMNS} FROM observations WHERE {where} "  # noqa: S608
                f"{order}LIMIT ?",
                (*params, limit),
            ).fetchall()
        return [self._observation(row) for row in rows]

    def observation(self, observation_id: int) -> Observation | None:
        found = self._observations("id = ?", (observation_id,), limit=1)
        return found[0] if found else None

    def observations_at(self, scope_id: int, end_digest: str) -> list[Observation]:
        """Every observation ending at ``end_digest``, all generations, newest first."""
        return self._observations("scope_id = ? AND end_digest = ?", (scope_id, end_digest))

    def observations_ending_at(
        self, scope_id: int, end_digests: Iterable[str]
    ) -> dict[str, list[Observation]]:
        """The observations ending at each of ``end_digests`` that has any, newest first,
        read in a few queries (a planning's messages all at once)."""
        found: dict[str, list[Observation]] = {}
        for batch in in_batches(dict.fromkeys(end_digests)):
            where = f"scope_id = ? AND end_digest IN ({placeholders(len(batch))})"
            for observation in self._observations(where, (scope_id, *batch)):
                found.setdefault(observation.end_digest, []).append(observation)
        return found

    def ends_with_records(self, scope_id: int, end_digests: Iterable[str]) -> set[str]:
        """Those of ``end_digests`` that an observation (any generation) ends at, from the
        index alone: no row is read or built."""
        found: set[str] = set()
        with self._db.read("read observations") as conn:
            for batch in in_batches(dict.fromkeys(end_digests)):
                rows = conn.execute(
                    "SELECT DISTINCT end_digest FROM observations "  # noqa: S608
                    f"WHERE scope_id = ? AND end_digest IN ({placeholders(len(batch))})",
                    (scope_id, *batch),
                )
                found.update(row[0] for row in rows)
        return found

    def repeats(
        self, scope_id: int, *, generation: int, position: int, start_digest: str,
        end_digest: str, envelope_fingerprint: str, payload_fingerprint: str,
        prior_plan: PriorPlan,
    ) -> list[int]:  # fmt: skip
        """Ids of the observations equal to this one in everything that was recorded (the
        plan compared by its length and chain digest: the same ordered blocks)."""
        with self._db.read("read observations") as conn:
            rows = conn.execute(
                "SELECT id FROM observations WHERE scope_id = ? AND end_digest = ? "
                "AND generation = ? AND position = ? AND start_digest = ? AND envelope_fp = ? "
                "AND payload_fp = ? AND prior_chain = ? AND prior_plan_count = ?",
                (scope_id, end_digest, generation, position, start_digest,
                 envelope_fingerprint, payload_fingerprint, prior_plan.chain, prior_plan.count),
            )  # fmt: skip
            return [row[0] for row in rows]

    def conflicts_at(
        self, scope_id: int, end_digest: str, payload_fingerprint: str, prior_plan: PriorPlan
    ) -> bool:
        """Whether an observation ending at ``end_digest`` holds another payload or was
        made on another plan (a malformed stored plan counts as another)."""
        with self._db.read("read observations") as conn:
            row = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM observations WHERE scope_id = ? "
                "AND end_digest = ? AND (payload_fp != ? OR prior_chain != ? "
                "OR prior_plan_count != ?))",
                (scope_id, end_digest, payload_fingerprint, prior_plan.chain, prior_plan.count),
            ).fetchone()
        return bool(row[0])

    def generation_ends(
        self, scope_id: int, start_digest: str, end_digests: Iterable[str]
    ) -> set[str]:
        """The end digests of every record of the generations recorded at ``start_digest``
        that end at one of ``end_digests``: all their spellings (one generation's records
        share its start, intent and payload; a missing intent matches a missing one). One
        query over the start's index that builds no row, however many competitors the
        start has collected."""
        found: set[str] = set()
        with self._db.read("read observations") as conn:
            for batch in in_batches(dict.fromkeys(end_digests)):
                rows = conn.execute(
                    "SELECT DISTINCT o.end_digest FROM observations AS o JOIN ("  # noqa: S608
                    "SELECT DISTINCT intent_id, payload_fp FROM observations "
                    "WHERE scope_id = ? AND start_digest = ? "
                    f"AND end_digest IN ({placeholders(len(batch))})) AS g "
                    "ON o.intent_id IS g.intent_id AND o.payload_fp = g.payload_fp "
                    "WHERE o.scope_id = ? AND o.start_digest = ?",
                    (scope_id, start_digest, *batch, scope_id, start_digest),
                )
                found.update(row[0] for row in rows)
        return found

    def lineage(self, scope_id: int, observation_id: int, limit: int) -> list[Observation]:
        """The observation ``observation_id`` and up to ``limit - 1`` more up its parent
        links, nearest first, in one query, as far as the links lead inside the scope (the
        planner checks every link's digest itself)."""
        with self._db.read("read observations") as conn:
            rows = conn.execute(_LINEAGE, (observation_id, limit, scope_id)).fetchall()
        return [self._observation(row) for row in rows]

    def observations_by_id(
        self, scope_id: int, observation_ids: Iterable[int]
    ) -> list[Observation]:
        """The scope's observations with these ids (any order; an id it has none of is
        left out), by primary key: a remembered chain's rows in one query instead of the
        recursive walk (:meth:`lineage`)."""
        found: list[Observation] = []
        for batch in in_batches(dict.fromkeys(observation_ids)):
            # "+scope_id": looked up by id alone, the scope only filtered (the planner
            # would otherwise scan the scope's end-digest index).
            where = f"id IN ({placeholders(len(batch))}) AND +scope_id = ?"
            found += self._observations(where, (*batch, scope_id), newest_first=False)
        return found

    def snapshot_last_seen(self, scope_id: int, snapshot: str) -> float | None:
        with self._db.read("read observations") as conn:
            row = conn.execute(
                "SELECT max(observed_at) FROM observations WHERE scope_id = ? AND snapshot = ?",
                (scope_id, snapshot),
            ).fetchone()
        return None if row is None else row[0]

    def add_observation(
        self, *, scope_id: int, generation: int, position: int, start_digest: str,
        end_digest: str, envelope_fingerprint: str, payload_fingerprint: str,
        output_hash: str, prior_plan: PriorPlan, intent_id: str | None,
        snapshot: str | None, replayable: bool, now: float,
    ) -> Observation:  # fmt: skip
        """Record one observed generation; a snapshot also becomes the scope's latest.
        ``ValueError`` for a prior plan that could not read back as one."""
        require_recordable(prior_plan)
        with self._db.write("record an observation") as conn:
            cursor = conn.execute(
                "INSERT INTO observations (scope_id, generation, position, start_digest, "
                "end_digest, envelope_fp, payload_fp, output_hash, parent_id, "
                "prior_plan_count, prior_chain, intent_id, snapshot, replayable, "
                "observed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (scope_id, generation, position, start_digest, end_digest,
                 envelope_fingerprint, payload_fingerprint, output_hash, prior_plan.parent_id,
                 prior_plan.count, prior_plan.chain, intent_id, snapshot,
                 int(replayable), now),
            )  # fmt: skip
            if snapshot is not None:
                conn.execute(
                    "UPDATE scopes SET latest_snapshot = ? WHERE id = ?", (snapshot, scope_id)
                )
        assert cursor.lastrowid is not None
        return Observation(
            cursor.lastrowid, scope_id, generation, position, start_digest, end_digest,
            envelope_fingerprint, payload_fingerprint, output_hash, prior_plan,
            intent_id, snapshot, replayable, now,
        )  # fmt: skip

    def children_of(self, observation_id: int) -> list[int]:
        """Ids of the observations generated with ``observation_id`` as the last block of
        their replay plan (its direct descendants), oldest first."""
        with self._db.read("read observations") as conn:
            rows = conn.execute(
                "SELECT id FROM observations WHERE parent_id = ? ORDER BY id", (observation_id,)
            )
            return [row[0] for row in rows]

    def has_retained_descendant(self, observation_id: int) -> bool:
        """Whether any observation generated on top of ``observation_id`` still has its
        payload (retention reclaims descendants before ancestors)."""
        with self._db.read("read observations") as conn:
            return has_retained_descendant(conn, observation_id)


def observation_from_row(row: Sequence[Any]) -> Observation:
    """An observation from its row, columns in Observation's field order (both stores read
    them so); built positionally, since a long plan reads hundreds of rows. A malformed
    prior plan is never replayable."""
    plan = PriorPlan(row[9], row[10], row[11])
    return Observation(
        row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8], plan,
        row[12], row[13], bool(row[14]) and plan.well_formed, row[15],
    )  # fmt: skip


def require_recordable(prior_plan: PriorPlan) -> None:
    """``ValueError`` for a prior plan that could not read back as one (both stores check
    it before recording an observation)."""
    if not prior_plan.well_formed or (prior_plan.count and prior_plan.parent_id is None):
        raise ValueError("a prior plan needs a link, a length and a chain digest that agree")
