"""The replay cache's SQLite store: the one module that talks to SQLite (design §6), with
its strict-provider tables in :mod:`relay.storage.strict_store` (``ReasoningStore.strict``,
the same connection).

One process owns the database: ``locking_mode=EXCLUSIVE`` plus a startup write means a
second relay on the same file fails at :meth:`ReasoningStore.open` with
:class:`~relay.errors.StoreLocked` instead of silently sharing safety state. WAL,
``synchronous=FULL`` and foreign keys are always on.

Writes happen only inside :meth:`ReasoningStore.transaction` (``BEGIN IMMEDIATE``), so a
caller groups every row of one decision into one all-or-nothing commit; a write method
called outside one raises ``RuntimeError``. Reads work inside or outside.

Every ``sqlite3`` error leaving this module is a :class:`~relay.errors.StoreError`
subclass whose message names the database path and SQLite's error code, never a value:
payloads are ciphertext and scope values are credential fingerprints.

A record's prior plan is three small columns (schema v5, design §6): ``parent_id`` (the
observation of the plan's last block), ``prior_plan_count`` and ``prior_chain`` (the
plan's chain digest). A row whose three do not form a plan is returned as stored with
``replayable=False`` (counted in :attr:`malformed_plans_seen`); the planner re-derives
every link's digest when it walks a chain (:meth:`ReasoningStore.lineage`), and a damaged
digest equals no valid plan's. So damage can only ever withhold replay, never enable it.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Final, Literal

from relay.clock import Clock
from relay.core.disk_policy import DEFAULT_RESERVE_BYTES, wal_policy
from relay.core.records import (
    TOUCH_GRANULARITY_S,
    MarkerKind,
    Observation,
    OversizedPayload,
    PriorPlan,
    ScopeRow,
    StoredPayload,
    StoredSizeExceeded,
)
from relay.core.scope import ScopeTargeting
from relay.errors import StoreCorrupt, StoreError, StoreFull, StoreIOError, StoreLocked
from relay.storage.aggregates import StoreAggregates, read_aggregates, source_bytes
from relay.storage.cleanup import PayloadCleanup, has_retained_descendant
from relay.storage.schema import (
    TABLES,
    VACUUM_PENDING_KEY,
    SchemaRefused,
    in_batches,
    migrate,
    placeholders,
)
from relay.storage.sqlite_copy import copy_pages
from relay.storage.strict_store import StrictEntries

SECRET_BYTES: Final = 32
# Markers or open intents of one scope read whole rather than matched through IN lists.
_FEW: Final = 64


# SQL built with f-strings interpolates only these constants and "?" placeholder lists.
_OBSERVATION_COLUMNS: Final = """id, scope_id, generation, position, start_digest,
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
    SELECT {_OBSERVATION_COLUMNS} FROM walk JOIN observations ON id = wid
    WHERE scope_id = ? ORDER BY depth"""  # noqa: S608
_SELECT_INTENTS: Final = """SELECT id, scope_id, phase, position, start_digest, created_at
    FROM intents ORDER BY created_at, id"""


class IntentPhase(StrEnum):
    DISPATCH = "dispatch"  # forwarded upstream, output not yet committed
    DELIVERY = "delivery"  # observation committed, terminal output being delivered


@dataclass(frozen=True)
class IntentRow:
    """An unresolved generation; resolved intents are deleted. Recovery needs no more: it
    poisons the position whatever the plan was (the plan's blocks are pinned through
    ``dependencies`` while the intent lives)."""

    id: str
    scope_id: int
    phase: IntentPhase
    position: int
    start_digest: str
    created_at: float


def _vacuum_if_pending(conn: sqlite3.Connection) -> None:
    """Reclaim the pages a committed migration freed (schema.DROPS_DATA), once: VACUUM
    cannot run inside the migration's transaction, so the flag that transaction wrote says
    it is still to do. VACUUM is atomic; a crash before it or before the flag's deletion
    only means the next start does it (again). Without room for VACUUM's temporary copy
    (SQLITE_FULL) the store is used as it is and the next start tries again."""
    if conn.execute("SELECT 1 FROM meta WHERE key = ?", (VACUUM_PENDING_KEY,)).fetchone():
        try:
            conn.execute("VACUUM")
        except sqlite3.Error as exc:
            if getattr(exc, "sqlite_errorcode", -1) & 0xFF != sqlite3.SQLITE_FULL:
                raise
            return
        conn.execute("DELETE FROM meta WHERE key = ?", (VACUUM_PENDING_KEY,))


def store_error(exc: sqlite3.Error, path: Path, action: str) -> StoreError:
    """Translate a sqlite3 error using its code only: its text may quote stored values."""
    name = getattr(exc, "sqlite_errorname", None)
    code = getattr(exc, "sqlite_errorcode", None)
    label = name or type(exc).__name__
    primary = -1 if code is None else code & 0xFF
    if primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return StoreLocked(
            f"another relay process owns the reasoning cache {path} ({label}); stop it "
            "or set REASONING_CACHE_PATH to another file",
            sqlite_error=name,
        )
    if primary == sqlite3.SQLITE_FULL:
        return StoreFull(
            f"reasoning cache {path}: {action} failed: the disk or the database size "
            f"limit is full ({label}); free disk space",
            sqlite_error=name,
        )
    if primary in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_FORMAT):
        return StoreCorrupt(
            f"reasoning cache {path}: {action} failed: the file is damaged or not a SQLite "
            f"database ({label}); move it aside or set REASONING_CACHE_PATH to another file",
            sqlite_error=name,
        )
    io_codes = (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY,
                sqlite3.SQLITE_PERM, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_PROTOCOL)  # fmt: skip
    if primary in io_codes:
        return StoreIOError(
            f"reasoning cache {path}: {action} failed ({label}); check the file, its "
            "directory and their permissions",
            sqlite_error=name,
        )
    return StoreError(f"reasoning cache {path}: {action} failed ({label})", sqlite_error=name)


def _matching(
    conn: sqlite3.Connection, select: str, params: tuple[Any, ...], column: str,
    values: Iterable[str],
) -> list[Any]:  # fmt: skip
    """The rows of ``select`` (one scope's markers or intents) whose ``column``, their first,
    is in ``values``. A scope has few of them: reading them all at once is cheaper than
    matching a plan's digests in IN lists; more than ``_FEW`` fall back to the lists."""
    wanted = dict.fromkeys(values)
    every = conn.execute(f"{select} LIMIT ?", (*params, _FEW + 1)).fetchall()
    if len(every) <= _FEW:
        return [row for row in every if row[0] in wanted]
    rows: list[Any] = []
    for batch in in_batches(wanted):
        sql = f"{select} AND {column} IN ({placeholders(len(batch))})"
        rows += conn.execute(sql, (*params, *batch))
    return rows


@dataclass(frozen=True)
class RecordSummary:
    """What the cache API may show of one observation: sizes, prefixes, model, times."""

    id: int
    model: str
    snapshot: str | None
    position: int
    replayable: bool
    payload_bytes: int | None  # None: observed only, or the payload was reclaimed
    end_digest_prefix: str
    observed_at: float
    touched_at: float | None


class ReasoningStore:
    """The replay cache's persistent state, owned exclusively by this process."""

    def __init__(self, conn: sqlite3.Connection, path: Path, secret: bytes, clock: Clock):
        """Use :meth:`open`."""
        self._conn: sqlite3.Connection | None = conn
        self._path = path
        self._secret = secret
        self._clock = clock
        self._in_transaction = False
        self._malformed_plans = 0
        # The strict-provider records (relay.strict), on this same connection.
        self.strict = StrictEntries(self._sqlite, self._writer, self.transaction)
        # Payload reclamation (relay.storage.cleanup), on this same connection.
        self.cleanup = PayloadCleanup(self._sqlite, self._writer, self.transaction, clock.wall)

    # --- lifecycle -------------------------------------------------------------------

    @staticmethod
    def exists(path: Path) -> bool:
        """Whether a store file is there (disabled startup must not create one)."""
        return path.exists()

    @classmethod
    def open(
        cls, path: Path, *, clock: Clock, reserve_bytes: int = DEFAULT_RESERVE_BYTES
    ) -> ReasoningStore:
        """Open (creating if needed) and take exclusive ownership of the store at ``path``.
        The WAL is bounded to ``reserve_bytes`` (see :func:`~relay.core.disk_policy.
        wal_policy`) and checkpointed before the startup write, so a full volume whose WAL
        holds the space can still be opened.

        Raises :class:`StoreLocked` when another process holds it, :class:`StoreCorrupt`
        for a file that is not a usable reasoning cache, other :class:`StoreError`\\ s for
        I/O trouble.
        """
        try:
            if not path.parent.exists():
                path.parent.mkdir(mode=0o700, parents=True)
                path.parent.chmod(0o700)  # mkdir's mode is filtered by the umask
            if not path.exists():
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                os.close(os.open(path, flags, 0o600))
        except OSError as exc:
            raise StoreIOError(
                f"cannot create the reasoning cache {path}: {exc.strerror}; check the "
                "directory and its permissions"
            ) from None
        try:
            # check_same_thread off for one caller only: the inspection copy's worker thread,
            # which steps the backup while the IOLoop waits (relay.storage.sqlite_copy).
            conn = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise store_error(exc, path, "open") from None
        try:
            secret = cls._take_ownership(conn, path, clock, reserve_bytes)
            for suffix in ("", "-wal", "-shm", "-journal"):
                sibling = path.with_name(path.name + suffix)
                if sibling.exists():
                    sibling.chmod(0o600)
        except OSError as exc:
            conn.close()
            raise StoreIOError(f"cannot restrict {path} to its owner: {exc.strerror}") from None
        except BaseException:
            conn.close()
            raise
        return cls(conn, path, secret, clock)

    @staticmethod
    def _take_ownership(
        conn: sqlite3.Connection, path: Path, clock: Clock, reserve_bytes: int
    ) -> bytes:
        """Set the PRAGMAs, migrate, and prove the lock with a write; returns the secret."""
        action = "open"
        try:
            # EXCLUSIVE before WAL: the WAL index then lives in process memory (no -shm)
            # and the first write's lock is kept until close.
            conn.execute("PRAGMA locking_mode = EXCLUSIVE")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreIOError(f"reasoning cache {path}: cannot enable WAL (got {mode})")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            # Disk pressure (design §6): a WAL bounded by the reserve, emptied into the
            # database before the startup write needs room for its own frames.
            wal = wal_policy(reserve_bytes, conn.execute("PRAGMA page_size").fetchone()[0])
            conn.execute(f"PRAGMA wal_autocheckpoint = {wal.autocheckpoint_pages:d}")
            conn.execute(f"PRAGMA journal_size_limit = {wal.journal_size_limit:d}")
            action = "the startup checkpoint"
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            action = "the startup write"
            conn.execute("BEGIN IMMEDIATE")
            try:
                migrate(conn)
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('secret', ?) "
                    "ON CONFLICT (key) DO NOTHING",
                    (secrets.token_bytes(SECRET_BYTES),),
                )
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('opened_at', ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (clock.wall(),),
                )
                secret = conn.execute("SELECT value FROM meta WHERE key = 'secret'").fetchone()
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            action = "the post-migration VACUUM"
            _vacuum_if_pending(conn)
        except SchemaRefused as exc:
            raise StoreCorrupt(
                f"{path} is not a usable reasoning cache: {exc}; move it aside or set "
                "REASONING_CACHE_PATH to another file"
            ) from None
        except sqlite3.Error as exc:
            raise store_error(exc, path, action) from None
        if not isinstance(secret[0], bytes) or len(secret[0]) != SECRET_BYTES:
            raise StoreCorrupt(f"reasoning cache {path}: the cache secret is malformed")
        return secret[0]

    def checkpoint(self) -> None:
        """Copy the WAL into the database and truncate it (after cleanup, at shutdown)."""
        with self._sqlite("checkpoint") as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    def used_bytes(self) -> int:
        """Database bytes in use: pages minus free pages (which later writes reuse)."""
        with self._sqlite("measure the database") as conn:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
            size = conn.execute("PRAGMA page_size").fetchone()[0]
        return int((pages - free) * size)

    def close(self) -> None:
        """Release the lock and the file; calling it again does nothing."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __enter__(self) -> ReasoningStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def path(self) -> Path:
        return self._path

    @property
    def secret(self) -> bytes:
        """The persistent cache-local secret that keys scope fingerprints."""
        return self._secret

    @property
    def malformed_plans_seen(self) -> int:
        """Rows read since open whose stored plan was malformed (returned non-replayable)."""
        return self._malformed_plans

    # --- transactions and error translation -------------------------------------------

    @contextmanager
    def _sqlite(self, action: str) -> Iterator[sqlite3.Connection]:
        if self._conn is None:
            raise StoreError(f"reasoning cache {self._path} is closed")
        try:
            yield self._conn
        except sqlite3.Error as exc:
            raise store_error(exc, self._path, action) from None

    def _writer(self, action: str) -> AbstractContextManager[sqlite3.Connection]:
        if not self._in_transaction:
            raise RuntimeError(f"{action} must run inside ReasoningStore.transaction()")
        return self._sqlite(action)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``; ``ROLLBACK`` when the body raises."""
        if self._in_transaction:
            raise RuntimeError("ReasoningStore transactions do not nest")
        with self._sqlite("begin a transaction") as conn:
            conn.execute("BEGIN IMMEDIATE")
        self._in_transaction = True
        try:
            yield
            with self._sqlite("commit") as conn:
                conn.execute("COMMIT")
        except BaseException:
            # SQLite may already have rolled back (e.g. after SQLITE_FULL).
            with self._sqlite("roll back") as conn:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            raise
        finally:
            self._in_transaction = False

    # --- scopes ------------------------------------------------------------------------

    def find_scope(self, digest: str) -> ScopeRow | None:
        with self._sqlite("read a scope") as conn:
            row = conn.execute(
                "SELECT id, digest, generation, credential, model, caller FROM scopes "
                "WHERE digest = ?",
                (digest,),
            ).fetchone()
        return None if row is None else ScopeRow(*row)

    def scope_for(self, digest: str, targeting: ScopeTargeting) -> ScopeRow:
        """The scope with ``digest``, created (generation 1) if new; opens its own short
        transaction when called outside one."""
        found = self.find_scope(digest)
        if found is not None:
            return found
        if not self._in_transaction:
            with self.transaction():
                return self.scope_for(digest, targeting)
        with self._writer("create a scope") as conn:
            conn.execute(
                "INSERT INTO scopes (digest, credential, model, caller, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (digest, targeting.credential, targeting.model, targeting.caller,
                 self._clock.wall()),
            )  # fmt: skip
        created = self.find_scope(digest)
        assert created is not None
        return created

    def scopes_targeted(self, *, credential: str, model: str, caller: str | None) -> list[int]:
        """Ids of scopes fencing must advance: credential/model, and caller unless None."""
        sql = "SELECT id FROM scopes WHERE credential = ? AND model = ?"
        params: tuple[str, ...] = (credential, model)
        if caller is not None:
            sql, params = sql + " AND caller = ?", (*params, caller)
        with self._sqlite("read scopes") as conn:
            return [row[0] for row in conn.execute(sql + " ORDER BY id", params)]

    def latest_snapshot(self, scope_id: int) -> str | None:
        with self._sqlite("read a scope") as conn:
            row = conn.execute(
                "SELECT latest_snapshot FROM scopes WHERE id = ?", (scope_id,)
            ).fetchone()
        return None if row is None else row[0]

    def advance_generations(self, scope_ids: Iterable[int] | None = None) -> int:
        """Start a new generation in the given scopes (``None``: all); returns how many."""
        with self._writer("advance generations") as conn:
            if scope_ids is None:
                return conn.execute("UPDATE scopes SET generation = generation + 1").rowcount
            changed = 0
            for batch in in_batches(dict.fromkeys(scope_ids)):
                changed += conn.execute(
                    "UPDATE scopes SET generation = generation + 1 "  # noqa: S608
                    f"WHERE id IN ({placeholders(len(batch))})",
                    batch,
                ).rowcount
            return changed

    # --- observations ------------------------------------------------------------------

    def _observations(
        self, where: str, params: Sequence[object], *, limit: int = -1, newest_first: bool = True
    ) -> list[Observation]:
        order = "ORDER BY id DESC " if newest_first else ""
        with self._sqlite("read observations") as conn:
            rows = conn.execute(
                f"SELECT {_OBSERVATION_COLUMNS} FROM observations WHERE {where} "  # noqa: S608
                f"{order}LIMIT ?",
                (*params, limit),
            ).fetchall()
        return [self._observation(row) for row in rows]

    def _observation(self, row: Sequence[Any]) -> Observation:
        # Columns in Observation's field order (_OBSERVATION_COLUMNS); built positionally,
        # since a long plan reads hundreds of rows.
        plan = PriorPlan(row[9], row[10], row[11])
        well_formed = plan.well_formed
        if not well_formed:
            self._malformed_plans += 1
        return Observation(
            row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8], plan,
            row[12], row[13], bool(row[14]) and well_formed, row[15],
        )  # fmt: skip

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
        with self._sqlite("read observations") as conn:
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
        with self._sqlite("read observations") as conn:
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
        with self._sqlite("read observations") as conn:
            row = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM observations WHERE scope_id = ? "
                "AND end_digest = ? AND (payload_fp != ? OR prior_chain != ? "
                "OR prior_plan_count != ?))",
                (scope_id, end_digest, payload_fingerprint, prior_plan.chain, prior_plan.count),
            ).fetchone()
        return bool(row[0])

    def observations_starting_at(self, scope_id: int, start_digest: str) -> list[Observation]:
        """Every observation generated at ``start_digest`` (competitors), newest first."""
        return self._observations("scope_id = ? AND start_digest = ?", (scope_id, start_digest))

    def lineage(self, scope_id: int, observation_id: int, limit: int) -> list[Observation]:
        """The observation ``observation_id`` and up to ``limit - 1`` more up its parent
        links, nearest first, in one query, as far as the links lead inside the scope (the
        planner checks every link's digest itself)."""
        with self._sqlite("read observations") as conn:
            rows = conn.execute(_LINEAGE, (observation_id, limit, scope_id)).fetchall()
        return [self._observation(row) for row in rows]

    def snapshot_last_seen(self, scope_id: int, snapshot: str) -> float | None:
        with self._sqlite("read observations") as conn:
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
        if not prior_plan.well_formed or (prior_plan.count and prior_plan.parent_id is None):
            raise ValueError("a prior plan needs a link, a length and a chain digest that agree")
        with self._writer("record an observation") as conn:
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
        with self._sqlite("read observations") as conn:
            rows = conn.execute(
                "SELECT id FROM observations WHERE parent_id = ? ORDER BY id", (observation_id,)
            )
            return [row[0] for row in rows]

    def has_retained_descendant(self, observation_id: int) -> bool:
        """Whether any observation generated on top of ``observation_id`` still has its
        payload (retention reclaims descendants before ancestors)."""
        with self._sqlite("read observations") as conn:
            return has_retained_descendant(conn, observation_id)

    # --- payloads ----------------------------------------------------------------------

    def load_payload(self, observation_id: int, *, max_bytes: int) -> StoredPayload | None:
        """The stored payload, or ``None``; raises :class:`StoredSizeExceeded` (see
        :meth:`load_payloads`)."""
        loaded = self.load_payloads([observation_id], max_bytes=max_bytes).get(observation_id)
        if isinstance(loaded, OversizedPayload):
            raise StoredSizeExceeded(loaded.describe())
        return loaded

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
        with self._sqlite("load payloads") as conn:
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
        with self._writer("store a payload") as conn:
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
        with self._writer("touch payloads") as conn:
            for batch in in_batches(dict.fromkeys(observation_ids)):
                conn.execute(
                    "UPDATE payloads SET touched_at = ? "  # noqa: S608
                    f"WHERE observation_id IN ({placeholders(len(batch))}) AND touched_at < ?",
                    (now, *batch, stale),
                )

    # --- markers -----------------------------------------------------------------------

    def add_marker(
        self, scope_id: int, kind: MarkerKind, digest: str, position: int, now: float
    ) -> bool:
        """Record a safety marker; ``False`` when it was already there (idempotent)."""
        with self._writer("record a marker") as conn:
            return bool(
                conn.execute(
                    "INSERT OR IGNORE INTO markers (scope_id, kind, digest, position, "
                    "created_at) VALUES (?, ?, ?, ?, ?)",
                    (scope_id, MarkerKind(kind).value, digest, position, now),
                ).rowcount
            )

    def _marked(self, scope_id: int, kind: MarkerKind, digests: Iterable[str]) -> set[str]:
        with self._sqlite("read markers") as conn:
            rows = _matching(
                conn, "SELECT digest FROM markers WHERE scope_id = ? AND kind = ?",
                (scope_id, kind.value), "digest", digests,
            )  # fmt: skip
        return {row[0] for row in rows}

    def poisoned_starts(self, scope_id: int, start_digests: Iterable[str]) -> set[str]:
        return self._marked(scope_id, MarkerKind.START_POISON, start_digests)

    def conflicted_ends(self, scope_id: int, end_digests: Iterable[str]) -> set[str]:
        return self._marked(scope_id, MarkerKind.END_CONFLICT, end_digests)

    def rejected_ends(self, scope_id: int, end_digests: Iterable[str]) -> set[str]:
        return self._marked(scope_id, MarkerKind.END_REJECTED, end_digests)

    # --- intents -----------------------------------------------------------------------

    def create_intent(
        self, intent_id: str, *, scope_id: int, position: int, start_digest: str, now: float
    ) -> None:
        """Record a generation about to be dispatched (phase ``dispatch``)."""
        with self._writer("record an intent") as conn:
            conn.execute(
                "INSERT INTO intents (id, scope_id, phase, position, start_digest, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (intent_id, scope_id, IntentPhase.DISPATCH.value, position, start_digest, now),
            )

    def pin(self, intent_id: str, observation_ids: Iterable[int]) -> None:
        """Keep these observations' payloads from cleanup while the intent lives."""
        with self._writer("pin dependencies") as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO dependencies (intent_id, ancestor_id) VALUES (?, ?)",
                [(intent_id, observation_id) for observation_id in observation_ids],
            )

    def set_intent_phase(
        self, intent_id: str, phase: IntentPhase | Literal["dispatch", "delivery"]
    ) -> bool:
        """``False`` when the intent does not exist."""
        with self._writer("update an intent") as conn:
            return bool(
                conn.execute(
                    "UPDATE intents SET phase = ? WHERE id = ?",
                    (IntentPhase(phase).value, intent_id),
                ).rowcount
            )

    def delete_intent(self, intent_id: str) -> bool:
        """Resolve an intent; its pins go with it. ``False`` when it was already gone."""
        with self._writer("delete an intent") as conn:
            return bool(conn.execute("DELETE FROM intents WHERE id = ?", (intent_id,)).rowcount)

    def unresolved_intents_at(
        self, scope_id: int, start_digests: Iterable[str]
    ) -> dict[str, set[str]]:
        """The ids of the intents still open at each of ``start_digests`` that has any."""
        found: dict[str, set[str]] = {}
        with self._sqlite("read intents") as conn:
            rows = _matching(
                conn, "SELECT start_digest, id FROM intents WHERE scope_id = ?",
                (scope_id,), "start_digest", start_digests,
            )  # fmt: skip
        for start, intent_id in rows:
            found.setdefault(start, set()).add(intent_id)
        return found

    def unresolved_intents(self) -> list[IntentRow]:
        """Every intent still in the table, oldest first (startup recovery poisons them)."""
        with self._sqlite("read intents") as conn:
            rows = conn.execute(_SELECT_INTENTS).fetchall()
        return [
            IntentRow(id_, scope_id, IntentPhase(phase), position, start, created)
            for id_, scope_id, phase, position, start, created in rows
        ]

    # --- meta and diagnostics ----------------------------------------------------------

    def meta(self, key: str) -> str | int | float | bytes | None:
        """A small stored fact (e.g. ``coverage-gap``); ``None`` when unset."""
        with self._sqlite("read metadata") as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str | int | float | None) -> None:
        """Set (``None``: delete) a stored fact; the secret cannot be changed."""
        if key == "secret":
            raise ValueError("the cache secret is created once and never replaced")
        with self._writer("write metadata") as conn:
            if value is None:
                conn.execute("DELETE FROM meta WHERE key = ?", (key,))
            else:
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES (?, ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (key, value),
                )

    def integrity_check(self) -> list[str]:
        """``PRAGMA integrity_check`` rows: ``["ok"]`` for a healthy database."""
        with self._sqlite("check integrity") as conn:
            return [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]

    def recent_records(self, *, model: str | None, limit: int) -> list[RecordSummary]:
        """Metadata of the newest observations (never payload or ciphertext): for the
        cache API. ``model`` filters on the scope's resolved model."""
        sql = (
            "SELECT o.id, s.model, o.snapshot, o.position, o.replayable, p.size, o.end_digest,"
            " o.observed_at, p.touched_at FROM observations o JOIN scopes s ON s.id = o.scope_id"
            " LEFT JOIN payloads p ON p.observation_id = o.id"
        )
        params: tuple[object, ...] = ()
        if model is not None:
            sql, params = sql + " WHERE s.model = ?", (model,)
        with self._sqlite("read observations") as conn:
            rows = conn.execute(sql + " ORDER BY o.id DESC LIMIT ?", (*params, limit)).fetchall()
        return [
            RecordSummary(r[0], r[1], r[2], r[3], bool(r[4]), r[5], r[6][:12], r[7], r[8])
            for r in rows
        ]

    def aggregates(self, *, scan_rows: int) -> StoreAggregates:
        """Bounded, read-only counts for the admin socket (relay.storage.aggregates)."""
        with self._sqlite("read aggregates") as conn:
            return read_aggregates(conn, self._path, scan_rows=scan_rows)

    def source_bytes(self) -> int:
        """What an inspection copy would copy: the main file's pages, in bytes."""
        with self._sqlite("read the page count") as conn:
            return source_bytes(conn)

    def copy_for_inspection(
        self,
        target: Path,
        *,
        pages: int,
        wait_turn: Callable[[], None],
        stepped: Callable[[int, int], None],
    ) -> None:
        """The online backup into ``target`` (on a worker thread, in lockstep with the
        IOLoop: relay.storage.sqlite_copy)."""
        if self._conn is None:
            raise StoreError(f"reasoning cache {self._path} is closed")
        copy_pages(self._conn, target, pages=pages, wait_turn=wait_turn, stepped=stepped)

    def stats(self) -> dict[str, int]:
        """Row counts per table plus stored payload bytes, for diagnostics."""
        with self._sqlite("count rows") as conn:
            count = "SELECT count(*) FROM {}"  # table names are constants
            counts = {t: conn.execute(count.format(t)).fetchone()[0] for t in TABLES}
            counts["payload_bytes"] = conn.execute(
                "SELECT coalesce(sum(size), 0) FROM payloads"
            ).fetchone()[0]
        return counts
