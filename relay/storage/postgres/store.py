"""The replay cache's shared PostgreSQL store: the SQLite store's semantics for several
relays at once (design §6 and "Team deployment: guarantee by guarantee").

One :class:`PostgresStore` per relay process, over a few reused psycopg connections
(:mod:`relay.storage.postgres.connections`). Writes
happen only inside :meth:`PostgresStore.transaction` (one connection, ``BEGIN`` …
``COMMIT`` with ``synchronous_commit = on``), so a decision's rows commit durably, all or
nothing, before the caller acts on them. Reads work inside or outside one.

Concurrency: SQLite serializes every write transaction; here a transaction locks the
conversation it touches. The first statement that names a scope inside a transaction
takes that scope's row lock (``SELECT … FOR UPDATE``) before reading anything of it, so
two relays dispatching, observing or resolving in one scope run one after the other,
each seeing the other's committed intent, markers and records. Store-wide transitions
(fencing, generation advances, lease recovery) lock their scopes in id order. A deadlock
or serialization failure leaves as :class:`~relay.errors.StoreContention`, which the
cache retries as a whole local transaction (never the model request).

Leases (:mod:`relay.storage.postgres.leases`): each process registers an instance row
whose expiry the database's clock sets; an intent names its instance.

Every psycopg error leaving this module is a :class:`~relay.errors.StoreError` whose
message names the database by its password-free description and PostgreSQL's SQLSTATE,
never a value.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, Literal

import psycopg
from psycopg import errors as pg_errors

from relay.clock import Clock
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
from relay.errors import (
    LeaseLapsed,
    StoreContention,
    StoreCorrupt,
    StoreError,
    StoreUnreachable,
)
from relay.settings.database_url import DatabaseUrl
from relay.storage.aggregates import PAYLOAD_BYTES_SCAN_ROWS, Bounded, StoreAggregates
from relay.storage.interface import IntentPhase, IntentRow, RecordSummary
from relay.storage.observations import observation_from_row, require_recordable
from relay.storage.postgres import leases
from relay.storage.postgres.cleanup import PgPayloadCleanup
from relay.storage.postgres.connections import Conn, Connections, StoreDown
from relay.storage.postgres.schema import SCHEMA_VERSION, TABLES, migrate
from relay.storage.postgres.strict import PgStrictEntries
from relay.storage.schema import SchemaRefused

SECRET_BYTES: Final = 32
# The tables relay.storage.aggregates counts (constants interpolated into SQL).
AGGREGATED: Final = ("scopes", "observations", "payloads", "markers", "intents", "strict_entries")
COVERAGE_GAP_KEY: Final = "coverage-gap"  # relay.storage.recovery's key
IDENTITY_KEY: Final = "database-identity"  # cluster id and database oid that wrote it
CONNECT_TIMEOUT_S: Final = 2


_OBSERVATION_COLUMNS: Final = """id, scope_id, generation, position, start_digest,
    end_digest, envelope_fp, payload_fp, output_hash, parent_id, prior_plan_count,
    prior_chain, intent_id, snapshot, replayable, observed_at"""
_FIND_SCOPE: Final = (
    "SELECT id, digest, generation, credential, model, caller FROM scopes WHERE digest = %s"
)
_LINEAGE: Final = f"""WITH RECURSIVE walk (wid, depth) AS (
        SELECT %s::bigint, 0
        UNION ALL
        SELECT o.parent_id, walk.depth + 1 FROM walk JOIN observations o ON o.id = walk.wid
        WHERE o.parent_id < o.id AND walk.depth + 1 < %s
    )
    SELECT {_OBSERVATION_COLUMNS} FROM walk JOIN observations ON id = wid
    WHERE scope_id = %s ORDER BY depth"""  # noqa: S608


def store_error(exc: BaseException, where: str, action: str) -> StoreError:
    """Translate a psycopg error using its class and SQLSTATE only: its text
    may quote stored values."""
    if isinstance(exc, StoreDown):
        return StoreUnreachable(
            f"reasoning cache {where}: {action} refused: the database was unreachable at "
            "the last attempt; the relay probes it in the background and serves again "
            "when it answers"
        )
    if isinstance(exc, psycopg.OperationalError) and not isinstance(
        exc, pg_errors.DeadlockDetected | pg_errors.QueryCanceled
    ):
        return StoreUnreachable(
            f"reasoning cache {where}: {action} failed: the database cannot be reached; "
            "the relay reconnects on its own when it is back"
        )
    sqlstate = getattr(exc, "sqlstate", None) or type(exc).__name__
    if isinstance(exc, pg_errors.SerializationFailure | pg_errors.DeadlockDetected):
        return StoreContention(
            f"reasoning cache {where}: {action} lost a race with another relay ({sqlstate})"
        )
    if isinstance(exc, pg_errors.ForeignKeyViolation) and action == "record an intent":
        return LeaseLapsed(
            f"reasoning cache {where}: this relay's lease lapsed before {action}; "
            "it registers again as a new instance"
        )
    return StoreError(f"reasoning cache {where}: {action} failed (SQLSTATE {sqlstate})")


class PostgresStore:
    """The replay cache's persistent state, shared by every relay on one database."""

    kind: Final = "postgresql"

    def __init__(
        self, pool: Connections, url: DatabaseUrl, secret: bytes, clock: Clock,
        *, lease_ms: int,
    ) -> None:  # fmt: skip
        """Use :meth:`open`."""
        self._pool: Connections | None = pool
        self.url = url
        self._secret = secret
        self._clock = clock
        self._tx: Conn | None = None
        self._locked: set[int] = set()
        # Intents whose resolution did not commit (the database went away): poisoned and
        # removed by recover_abandoned once it is back, not when this instance dies.
        self.abandoned: set[str] = set()
        self.abandoned_recovered = 0
        self._malformed_plans = 0
        self.lease_ms = lease_ms
        self.instance_id = ""  # set by register(); a new one after a lapse
        self.lease_lapses = 0  # times this process found its lease gone and came back new
        self.barrier_cutoff: float | None = None  # published with each heartbeat
        self.strict = PgStrictEntries(self._read, self._writer, self.transaction)
        self.cleanup = PgPayloadCleanup(self, clock.wall)

    # --- lifecycle -------------------------------------------------------------------

    @classmethod
    def open(cls, url: DatabaseUrl, *, clock: Clock, lease_ms: int) -> PostgresStore:
        """Connect, migrate (refusing a newer schema), create the secret once, and register
        this process's lease. Raises :class:`StoreUnreachable` when the database cannot be
        reached, :class:`StoreCorrupt` for one that is not a usable reasoning cache."""
        pool = Connections(
            url.conninfo, connect_timeout=CONNECT_TIMEOUT_S, monotonic=clock.monotonic
        )
        try:
            with pool.connection():
                pass  # reachable, and the credentials work
        except psycopg.Error:
            raise StoreUnreachable(
                f"cannot reach the reasoning cache database {url}: check REASONING_CACHE_URL, "
                "the server and its authentication (PGPASSFILE/PGPASSWORD)"
            ) from None
        try:
            secret = cls._prepare(pool, url)
            store = cls(pool, url, secret, clock, lease_ms=lease_ms)
            store.register()
        except BaseException:
            pool.close()
            raise
        return store

    @staticmethod
    def _prepare(pool: Connections, url: DatabaseUrl) -> bytes:
        try:
            with pool.connection() as conn, conn.transaction():
                migrate(conn)
                _quarantine_if_restored(conn)
                conn.execute(
                    "INSERT INTO store_secret (secret) VALUES (%s) ON CONFLICT DO NOTHING",
                    (secrets.token_bytes(SECRET_BYTES),),
                )
                row = conn.execute("SELECT secret FROM store_secret").fetchone()
        except SchemaRefused as exc:
            raise StoreCorrupt(
                f"{url} is not a usable reasoning cache: {exc}; point REASONING_CACHE_URL "
                "at another database"
            ) from None
        except psycopg.Error as exc:
            raise store_error(exc, str(url), "the startup migration") from None
        if row is None or len(bytes(row[0])) != SECRET_BYTES:
            raise StoreCorrupt(f"reasoning cache {url}: the cache secret is malformed")
        return bytes(row[0])

    def register(self) -> None:
        """Take a new lease (a new instance id): at startup and after a lapse."""
        with self._read("register a lease") as conn:
            self.instance_id = leases.register(conn, self.lease_ms)

    def heartbeat(self) -> bool:
        """Renew this instance's lease and publish its barrier; ``False`` when it had
        lapsed (the instance registered again as new)."""
        with self._read("renew the lease") as conn:
            alive = leases.renew(conn, self.instance_id, self.lease_ms, self.barrier_cutoff)
        if not alive:
            self.lease_lapses += 1
            self.register()
        return alive

    def recover_lapsed(self, now: float) -> int:
        """Poison and remove the unresolved intents of every instance whose lease lapsed,
        and their lease rows (the shared-store analogue of startup recovery)."""
        with self.transaction():
            assert self._tx is not None
            return leases.recover_lapsed(self._tx, now)

    def abandon(self, intent_id: str) -> None:
        """This instance could not resolve ``intent_id`` (the database went away): it is
        poisoned and removed by :meth:`recover_abandoned` once the database answers, not
        only when this instance's lease lapses."""
        self.abandoned.add(intent_id)

    def recover_abandoned(self, now: float) -> int:
        """Poison the start of each intent of :attr:`abandoned` still open and remove it
        (what lease recovery does for a dead instance's), once the database answers; how
        many were still open. An intent resolved meanwhile is only forgotten."""
        wanted = sorted(self.abandoned)
        if not wanted:
            return 0
        with self.transaction():
            assert self._tx is not None
            found = leases.poison_intents(self._tx, wanted, now)
        self.abandoned.difference_update(wanted)
        self.abandoned_recovered += found
        return found

    @property
    def connections(self) -> Connections | None:
        """The connections (``None`` once closed): their probe state, for diagnostics."""
        return self._pool

    def live_instances(self) -> list[leases.InstanceLease]:
        with self._read("read leases") as conn:
            return leases.live(conn)

    def checkpoint(self) -> None:
        """Nothing to do: PostgreSQL checkpoints itself."""

    def used_bytes(self) -> int:
        """The database's size (``pg_database_size``), for REASONING_CACHE_DISK_BYTES."""
        with self._read("measure the database") as conn:
            row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        return int(row[0]) if row is not None else 0

    def close(self) -> None:
        """Give the lease back (its intents stay for a survivor to poison) and close."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            with pool.connection() as conn:
                leases.release(conn, self.instance_id)
        except psycopg.Error:
            pass  # the lease lapses on its own
        pool.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def secret(self) -> bytes:
        return self._secret

    @property
    def malformed_plans_seen(self) -> int:
        return self._malformed_plans

    # --- transactions and error translation -------------------------------------------

    @contextmanager
    def _read(self, action: str) -> Iterator[Conn]:
        """The transaction's connection, or a pooled one in autocommit."""
        if self._tx is not None:
            try:
                yield self._tx
            except psycopg.Error as exc:
                raise store_error(exc, str(self.url), action) from None
            return
        if self._pool is None:
            raise StoreError(f"reasoning cache {self.url} is closed")
        try:
            with self._pool.connection() as conn:
                yield conn
        except psycopg.Error as exc:
            raise store_error(exc, str(self.url), action) from None

    @contextmanager
    def _writer(self, action: str) -> Iterator[Conn]:
        if self._tx is None:
            raise RuntimeError(f"{action} must run inside PostgresStore.transaction()")
        with self._read(action) as conn:
            yield conn

    @contextmanager
    def transaction(self, *, before_send: bool = False) -> Iterator[None]:
        """``BEGIN`` … ``COMMIT`` (durable: ``synchronous_commit = on``); ``ROLLBACK`` when
        the body raises. ``before_send`` changes nothing here: PostgreSQL's checkpoints
        are the server's, never in a client's commit."""
        del before_send
        if self._tx is not None:
            raise RuntimeError("PostgresStore transactions do not nest")
        if self._pool is None:
            raise StoreError(f"reasoning cache {self.url} is closed")
        try:
            with self._pool.connection() as conn, conn.transaction():
                conn.execute("SET LOCAL synchronous_commit = on")
                self._tx = conn
                try:
                    yield
                finally:
                    self._tx = None
                    self._locked.clear()
        except psycopg.Error as exc:
            raise store_error(exc, str(self.url), "a transaction") from None

    def _lock_scope(self, conn: Conn, scope_id: int) -> None:
        """Inside a transaction, the first touch of a scope locks its row: whoever reads
        the scope's state to decide then writes it holds the conversation alone."""
        if self._tx is not None and scope_id not in self._locked:
            conn.execute("SELECT 1 FROM scopes WHERE id = %s FOR UPDATE", (scope_id,))
            self._locked.add(scope_id)

    @contextmanager
    def _scoped(self, scope_id: int, action: str) -> Iterator[Conn]:
        with self._read(action) as conn:
            self._lock_scope(conn, scope_id)
            yield conn

    # --- scopes ------------------------------------------------------------------------

    def find_scope(self, digest: str) -> ScopeRow | None:
        with self._read("read a scope") as conn:
            sql = _FIND_SCOPE + (" FOR UPDATE" if self._tx is not None else "")
            row = conn.execute(sql.encode(), (digest,)).fetchone()
            if row is not None and self._tx is not None:
                self._locked.add(row[0])
        return None if row is None else ScopeRow(*row)

    def scope_for(self, digest: str, targeting: ScopeTargeting) -> ScopeRow:
        """The scope with ``digest``, created (generation 1) if new, and locked when inside
        a transaction; opens its own short transaction when called outside one."""
        if self._tx is None:
            with self.transaction():
                return self.scope_for(digest, targeting)
        with self._writer("create a scope") as conn:
            conn.execute(
                "INSERT INTO scopes (digest, credential, model, caller, created_at) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (digest) DO NOTHING",
                (digest, targeting.credential, targeting.model, targeting.caller,
                 self._clock.wall()),
            )  # fmt: skip
        found = self.find_scope(digest)
        assert found is not None
        return found

    def scopes_targeted(self, *, credential: str, model: str, caller: str | None) -> list[int]:
        """Ids of scopes fencing must advance (locked, in id order, inside a transaction)."""
        sql = "SELECT id FROM scopes WHERE credential = %s AND model = %s"
        params: tuple[str, ...] = (credential, model)
        if caller is not None:
            sql, params = sql + " AND caller = %s", (*params, caller)
        sql += " ORDER BY id" + (" FOR UPDATE" if self._tx is not None else "")
        with self._read("read scopes") as conn:
            ids = [row[0] for row in conn.execute(sql.encode(), params)]
        if self._tx is not None:
            self._locked.update(ids)
        return ids

    def latest_snapshot(self, scope_id: int) -> str | None:
        with self._scoped(scope_id, "read a scope") as conn:
            row = conn.execute(
                "SELECT latest_snapshot FROM scopes WHERE id = %s", (scope_id,)
            ).fetchone()
        return None if row is None else row[0]

    def advance_generations(self, scope_ids: Iterable[int] | None = None) -> int:
        """Start a new generation in the given scopes (``None``: all); returns how many.
        Rows are locked in id order first, as fencing does: no deadlock between them."""
        with self._writer("advance generations") as conn:
            if scope_ids is None:
                conn.execute("SELECT id FROM scopes ORDER BY id FOR UPDATE")
                cursor = conn.execute("UPDATE scopes SET generation = generation + 1")
            else:
                ids = sorted(set(scope_ids))
                conn.execute(
                    "SELECT id FROM scopes WHERE id = ANY(%s) ORDER BY id FOR UPDATE", (ids,)
                )
                cursor = conn.execute(
                    "UPDATE scopes SET generation = generation + 1 WHERE id = ANY(%s)", (ids,)
                )
            return cursor.rowcount

    # --- observations ------------------------------------------------------------------

    def _observations(
        self, scope_id: int | None, where: str, params: Sequence[object], *,
        limit: int | None = None,
    ) -> list[Observation]:  # fmt: skip
        sql = f"SELECT {_OBSERVATION_COLUMNS} FROM observations WHERE {where} ORDER BY id DESC"  # noqa: S608
        if limit is not None:
            sql, params = sql + " LIMIT %s", (*params, limit)
        with self._read("read observations") as conn:
            if scope_id is not None:
                self._lock_scope(conn, scope_id)
            rows = conn.execute(sql.encode(), params).fetchall()
        return [self._observation(row) for row in rows]

    def _observation(self, row: Sequence[Any]) -> Observation:
        observation = observation_from_row(row)
        if not observation.prior_plan.well_formed:
            self._malformed_plans += 1
        return observation

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
        with self._scoped(scope_id, "read observations") as conn:
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
        with self._scoped(scope_id, "read observations") as conn:
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
        with self._scoped(scope_id, "read observations") as conn:
            row = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM observations WHERE scope_id = %s "
                "AND end_digest = %s AND (payload_fp != %s OR prior_chain != %s "
                "OR prior_plan_count != %s))",
                (scope_id, end_digest, payload_fingerprint, prior_plan.chain, prior_plan.count),
            ).fetchone()
        return bool(row and row[0])

    def observations_starting_at(self, scope_id: int, start_digest: str) -> list[Observation]:
        return self._observations(
            scope_id, "scope_id = %s AND start_digest = %s", (scope_id, start_digest)
        )

    def lineage(self, scope_id: int, observation_id: int, limit: int) -> list[Observation]:
        with self._scoped(scope_id, "read observations") as conn:
            rows = conn.execute(_LINEAGE.encode(), (observation_id, limit, scope_id)).fetchall()
        return [self._observation(row) for row in rows]

    def snapshot_last_seen(self, scope_id: int, snapshot: str) -> float | None:
        with self._scoped(scope_id, "read observations") as conn:
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
        with self._writer("record an observation") as conn:
            self._lock_scope(conn, scope_id)
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
        with self._read("read observations") as conn:
            rows = conn.execute(
                "SELECT id FROM observations WHERE parent_id = %s ORDER BY id", (observation_id,)
            )
            return [row[0] for row in rows]

    def has_retained_descendant(self, observation_id: int) -> bool:
        with self._read("read observations") as conn:
            return has_retained_descendant(conn, observation_id)

    # --- payloads ----------------------------------------------------------------------

    def load_payload(self, observation_id: int, *, max_bytes: int) -> StoredPayload | None:
        loaded = self.load_payloads([observation_id], max_bytes=max_bytes).get(observation_id)
        if isinstance(loaded, OversizedPayload):
            raise StoredSizeExceeded(loaded.describe())
        return loaded

    def load_payloads(
        self, observation_ids: Iterable[int], *, max_bytes: int
    ) -> dict[int, StoredPayload | OversizedPayload]:
        """Like the SQLite store's: decided on the size column, so oversize bytes are never
        loaded, and measured again after loading."""
        loaded: dict[int, StoredPayload | OversizedPayload] = {}
        wanted = list(dict.fromkeys(observation_ids))
        if not wanted:
            return loaded
        with self._read("load payloads") as conn:
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
        with self._writer("store a payload") as conn:
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
        with self._writer("touch payloads") as conn:
            conn.execute(
                "UPDATE payloads SET touched_at = %s "
                "WHERE observation_id = ANY(%s) AND touched_at < %s",
                (now, wanted, now - TOUCH_GRANULARITY_S),
            )

    # --- markers -----------------------------------------------------------------------

    def add_marker(
        self, scope_id: int, kind: MarkerKind, digest: str, position: int, now: float
    ) -> bool:
        with self._writer("record a marker") as conn:
            self._lock_scope(conn, scope_id)
            cursor = conn.execute(
                "INSERT INTO markers (scope_id, kind, digest, position, created_at) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (scope_id, MarkerKind(kind).value, digest, position, now),
            )
            return bool(cursor.rowcount)

    def _marked(self, scope_id: int, kind: MarkerKind, digests: Iterable[str]) -> set[str]:
        wanted = list(dict.fromkeys(digests))
        if not wanted:
            return set()
        with self._scoped(scope_id, "read markers") as conn:
            rows = conn.execute(
                "SELECT digest FROM markers WHERE scope_id = %s AND kind = %s AND digest = ANY(%s)",
                (scope_id, kind.value, wanted),
            )
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
        """Record a generation about to be dispatched, owned by this instance's lease: an
        insert that finds the lease lapsed (by the database's clock) fails with
        :class:`LeaseLapsed` before anything is forwarded."""
        with self._writer("record an intent") as conn:
            self._lock_scope(conn, scope_id)
            cursor = conn.execute(
                "INSERT INTO intents (id, scope_id, instance_id, phase, position, "
                "start_digest, created_at) SELECT %s, %s, id, %s, %s, %s, %s FROM instances "
                "WHERE id = %s AND expires_at > clock_timestamp() FOR KEY SHARE",
                (intent_id, scope_id, IntentPhase.DISPATCH.value, position, start_digest,
                 now, self.instance_id),
            )  # fmt: skip
            if cursor.rowcount != 1:
                raise LeaseLapsed(
                    f"reasoning cache {self.url}: this relay's lease lapsed before it could "
                    "record a dispatch; it registers again as a new instance"
                )

    def pin(self, intent_id: str, observation_ids: Iterable[int]) -> None:
        """One statement for the whole plan (an array, not a row per block)."""
        ids = list(dict.fromkeys(observation_ids))
        if not ids:
            return
        with self._writer("pin dependencies") as conn:
            conn.execute(
                "INSERT INTO dependencies (intent_id, ancestor_id) "
                "SELECT %s, unnest(%s::bigint[]) ON CONFLICT DO NOTHING",
                (intent_id, ids),
            )

    def set_intent_phase(
        self, intent_id: str, phase: IntentPhase | Literal["dispatch", "delivery"]
    ) -> bool:
        with self._writer("update an intent") as conn:
            cursor = conn.execute(
                "UPDATE intents SET phase = %s WHERE id = %s", (IntentPhase(phase).value, intent_id)
            )
            return bool(cursor.rowcount)

    def delete_intent(self, intent_id: str) -> bool:
        with self._writer("delete an intent") as conn:
            return bool(conn.execute("DELETE FROM intents WHERE id = %s", (intent_id,)).rowcount)

    def unresolved_intents_at(
        self, scope_id: int, start_digests: Iterable[str]
    ) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        wanted = list(dict.fromkeys(start_digests))
        if not wanted:
            return found
        with self._scoped(scope_id, "read intents") as conn:
            rows = conn.execute(
                "SELECT start_digest, id FROM intents WHERE scope_id = %s "
                "AND start_digest = ANY(%s)",
                (scope_id, wanted),
            ).fetchall()
        for start, intent_id in rows:
            found.setdefault(start, set()).add(intent_id)
        return found

    def unresolved_intents(self) -> list[IntentRow]:
        """Every open intent of every instance, oldest first (fencing poisons those of its
        scopes; lease recovery, not this, decides whose intents are abandoned)."""
        with self._read("read intents") as conn:
            rows = conn.execute(
                "SELECT id, scope_id, phase, position, start_digest, created_at FROM intents "
                "ORDER BY created_at, id"
            ).fetchall()
        return [
            IntentRow(id_, scope_id, IntentPhase(phase), position, start, created)
            for id_, scope_id, phase, position, start, created in rows
        ]

    # --- meta and diagnostics ----------------------------------------------------------

    def meta(self, key: str) -> str | int | float | bytes | None:
        with self._read("read metadata") as conn:
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
            self.advance_generations(None)
            return
        with self._writer("write metadata") as conn:
            if value is None:
                conn.execute("DELETE FROM meta WHERE key = %s", (key,))
            else:
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES (%s, %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (key, str(value)),
                )

    def integrity_check(self) -> list[str]:
        """PostgreSQL keeps its own pages consistent; what can break is ours: rows whose
        references no constraint checks (an intent's pins, a record's parent)."""
        with self._read("check integrity") as conn:
            row = conn.execute(
                "SELECT (SELECT count(*) FROM observations o WHERE parent_id IS NOT NULL "
                "AND NOT EXISTS (SELECT 1 FROM observations p WHERE p.id = o.parent_id)), "
                "(SELECT version FROM relay_schema)"
            ).fetchone()
        assert row is not None
        problems = []
        if row[0]:
            problems.append(f"{row[0]} observations link to a missing parent")
        if row[1] != SCHEMA_VERSION:
            problems.append(f"schema version {row[1]}, expected {SCHEMA_VERSION}")
        return problems or ["ok"]

    def recent_records(self, *, model: str | None, limit: int) -> list[RecordSummary]:
        sql = (
            "SELECT o.id, s.model, o.snapshot, o.position, o.replayable, p.size, o.end_digest,"
            " o.observed_at, p.touched_at FROM observations o JOIN scopes s ON s.id = o.scope_id"
            " LEFT JOIN payloads p ON p.observation_id = o.id"
        )
        params: tuple[object, ...] = ()
        if model is not None:
            sql, params = sql + " WHERE s.model = %s", (model,)
        with self._read("read observations") as conn:
            rows = conn.execute(
                (sql + " ORDER BY o.id DESC LIMIT %s").encode(), (*params, limit)
            ).fetchall()
        return [
            RecordSummary(r[0], r[1], r[2], r[3], bool(r[4]), r[5], r[6][:12], r[7], r[8])
            for r in rows
        ]

    def aggregates(self, *, scan_rows: int) -> StoreAggregates:
        """The admin socket's bounded counts (:mod:`relay.storage.aggregates`), in one
        read-only transaction: an admin poll writes nothing. ``file_bytes`` is the whole
        database's size (``pg_database_size``); there is no WAL of the relay's own."""
        if self._pool is None:
            raise StoreError(f"reasoning cache {self.url} is closed")
        limit = min(scan_rows, PAYLOAD_BYTES_SCAN_ROWS)
        try:
            with self._pool.connection() as conn, conn.transaction():
                conn.execute("SET TRANSACTION READ ONLY")
                counts: dict[str, Bounded] = {}
                for table in AGGREGATED:  # constants
                    sql = f"SELECT count(*) FROM (SELECT 1 FROM {table} LIMIT %s) AS t"  # noqa: S608
                    n = _one(conn.execute(sql.encode(), (scan_rows + 1,)).fetchone())
                    counts[table] = Bounded(min(n, scan_rows), n <= scan_rows)
                row = conn.execute(
                    "SELECT count(*), coalesce(sum(size), 0) FROM "
                    "(SELECT size FROM payloads LIMIT %s) AS p",
                    (limit,),
                ).fetchone()
                assert row is not None
                more = conn.execute(
                    "SELECT count(*) FROM (SELECT 1 FROM payloads LIMIT %s) AS p", (limit + 1,)
                ).fetchone()
                row2 = conn.execute(
                    "SELECT pg_database_size(current_database()), "
                    "(SELECT min(touched_at) FROM payloads), "
                    "(SELECT observed_at FROM observations ORDER BY id DESC LIMIT 1)"
                ).fetchone()
                assert row2 is not None
        except psycopg.Error as exc:
            raise store_error(exc, str(self.url), "read aggregates") from None
        return StoreAggregates(
            file_bytes=int(row2[0]),
            free_bytes=0,
            wal_bytes=0,
            counts=counts,
            payload_bytes=Bounded(int(row[1]), _one(more) <= limit),
            oldest_payload_touched_at=row2[1],
            newest_observation_at=row2[2],
        )

    def source_bytes(self) -> int:
        """What an inspection copy would read: the database's size."""
        return self.used_bytes()

    def copy_for_inspection(
        self,
        target: Path,
        *,
        pages: int,
        wait_turn: Callable[[], None],
        stepped: Callable[[int, int], None],
    ) -> None:
        """No SQLite pages to copy: the shared store's inspection copy is pg_dump's."""
        raise StoreError(
            f"reasoning cache {self.url}: the inspection snapshot copies a SQLite store; "
            "for the shared PostgreSQL store use pg_dump --format=custom on a replica or "
            "during a quiet period"
        )

    def stats(self) -> dict[str, int]:
        with self._read("count rows") as conn:
            counts: dict[str, int] = {}
            for table in TABLES:  # constants
                row = conn.execute(f"SELECT count(*) FROM {table}".encode()).fetchone()  # noqa: S608
                counts[table] = int(row[0]) if row is not None else 0
            row = conn.execute("SELECT coalesce(sum(size), 0) FROM payloads").fetchone()
            counts["payload_bytes"] = int(row[0]) if row is not None else 0
        return counts


def _quarantine_if_restored(conn: Conn) -> bool:
    """A database restored from a dump (``pg_restore`` into a new database: another
    cluster or database oid than the one that wrote it) is treated as the offline restore
    of a SQLite store is (design §7 backups): a fresh secret, every generation advanced
    (the coverage gap of everything served since the dump), every open intent poisoned
    and no lease carried over. Inside the startup transaction; whether it did."""
    row = conn.execute(
        # A managed service may deny pg_control_system(): the oid alone then (a dump
        # restored into another database still gets another oid).
        "SELECT CASE WHEN has_function_privilege('pg_control_system()', 'EXECUTE') "
        "THEN (SELECT system_identifier FROM pg_control_system())::text ELSE '' END "
        "|| ':' || (SELECT oid FROM pg_database WHERE datname = current_database())::text"
    ).fetchone()
    assert row is not None
    identity = str(row[0])
    stored = conn.execute("SELECT value FROM meta WHERE key = %s", (IDENTITY_KEY,)).fetchone()
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (%s, %s) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (IDENTITY_KEY, identity),
    )
    if stored is None or stored[0] == identity:
        return False
    conn.execute("DELETE FROM store_secret")
    conn.execute("UPDATE scopes SET generation = generation + 1")
    conn.execute(
        "INSERT INTO markers (scope_id, kind, digest, position, created_at) "
        "SELECT scope_id, %s, start_digest, position, created_at FROM intents "
        "ON CONFLICT DO NOTHING",
        (MarkerKind.START_POISON.value,),
    )
    conn.execute("DELETE FROM intents")
    conn.execute("DELETE FROM instances")
    return True


def _one(row: Sequence[Any] | None) -> int:
    return 0 if row is None else int(row[0])


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
