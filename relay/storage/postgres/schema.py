"""The shared PostgreSQL store's schema and its migrations (design §6, "Team deployment").

Versioned like the SQLite schema, with its own numbering (it starts from SQLite's v7
tables, without their history): ``relay_schema.version`` is the version, ``MIGRATIONS[k]``
takes a database from ``k`` to ``k + 1``, and :func:`migrate` applies every pending step
in the caller's transaction under a transaction-scoped advisory lock, so two relays
starting at once migrate one after the other and a crash mid-migration leaves the old
version. A database whose version is newer than this relay knows is refused
(:class:`~relay.storage.schema.SchemaTooNew`).

Differences from SQLite, each for the shared store: payloads are ``bytea`` (the stored
UTF-8 bytes are replayed and hashed exactly as stored); every intent names the instance
that dispatched it, whose lease (``instances``) says whether it is still alive; an
instance publishes its retention barrier's cutoff beside its lease.
"""

from __future__ import annotations

from typing import Final

import psycopg

from relay.storage.schema import SchemaRefused, SchemaTooNew

# pg_advisory_xact_lock keys (any bigint: these spell "RRRmigr" and "RRRclean").
MIGRATION_LOCK: Final = 0x5252526D69677200
CLEANUP_LOCK: Final = 0x525252636C65616E

_VERSION_1: Final = (
    # The cache-local secret lives in one row of its own (bytea); other facts are text.
    """CREATE TABLE store_secret (
        only_row BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row),
        secret BYTEA NOT NULL
    )""",
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE scopes (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        digest TEXT NOT NULL UNIQUE,
        generation INTEGER NOT NULL DEFAULT 1 CHECK (generation >= 1),
        credential TEXT NOT NULL,
        model TEXT NOT NULL,
        caller TEXT,
        latest_snapshot TEXT,
        created_at DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX scopes_by_target ON scopes (credential, model, caller)",
    # Identity ids are never reused, so a cached object keyed by id stays valid.
    """CREATE TABLE observations (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        scope_id BIGINT NOT NULL REFERENCES scopes (id),
        generation INTEGER NOT NULL,
        position INTEGER NOT NULL CHECK (position >= 0),
        start_digest TEXT NOT NULL,
        end_digest TEXT NOT NULL,
        envelope_fp TEXT NOT NULL,
        payload_fp TEXT NOT NULL,
        output_hash TEXT NOT NULL,
        parent_id BIGINT REFERENCES observations (id),
        prior_plan_count INTEGER NOT NULL CHECK (prior_plan_count >= 0),
        prior_chain TEXT NOT NULL,
        intent_id TEXT,
        snapshot TEXT,
        replayable BOOLEAN NOT NULL,
        observed_at DOUBLE PRECISION NOT NULL,
        reclaimed_at DOUBLE PRECISION
    )""",
    "CREATE INDEX observations_by_end ON observations (scope_id, end_digest)",
    "CREATE INDEX observations_by_start ON observations (scope_id, start_digest)",
    "CREATE INDEX observations_by_snapshot ON observations (scope_id, snapshot, observed_at)",
    "CREATE INDEX observations_by_parent ON observations (parent_id) WHERE parent_id IS NOT NULL",
    """CREATE TABLE payloads (
        observation_id BIGINT PRIMARY KEY REFERENCES observations (id) ON DELETE CASCADE,
        output_json BYTEA NOT NULL,
        size INTEGER NOT NULL CHECK (size >= 0),
        touched_at DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX payloads_by_touch ON payloads (touched_at)",
    """CREATE TABLE markers (
        scope_id BIGINT NOT NULL REFERENCES scopes (id),
        kind TEXT NOT NULL CHECK (kind IN ('start_poison', 'end_conflict', 'end_rejected')),
        digest TEXT NOT NULL,
        position INTEGER NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (scope_id, kind, digest)
    )""",
    # Leases are timed by the database's clock (timestamptz from clock_timestamp()).
    # barrier_cutoff: the instance's retention cutoff (NULL: its deletion barrier is shut).
    """CREATE TABLE instances (
        id TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        started_at TIMESTAMPTZ NOT NULL,
        renewed_at TIMESTAMPTZ NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL,
        barrier_cutoff DOUBLE PRECISION
    )""",
    # The foreign key takes a share lock on the lease row: a survivor poisoning a lapsed
    # instance locks that row first, so no intent of the instance commits behind its back.
    """CREATE TABLE intents (
        id TEXT PRIMARY KEY,
        scope_id BIGINT NOT NULL REFERENCES scopes (id),
        instance_id TEXT NOT NULL REFERENCES instances (id),
        phase TEXT NOT NULL CHECK (phase IN ('dispatch', 'delivery')),
        position INTEGER NOT NULL,
        start_digest TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX intents_by_start ON intents (scope_id, start_digest)",
    "CREATE INDEX intents_by_instance ON intents (instance_id)",
    """CREATE TABLE dependencies (
        intent_id TEXT NOT NULL REFERENCES intents (id) ON DELETE CASCADE,
        ancestor_id BIGINT NOT NULL REFERENCES observations (id),
        PRIMARY KEY (intent_id, ancestor_id)
    )""",
    "CREATE INDEX dependencies_by_ancestor ON dependencies (ancestor_id)",
    """CREATE TABLE strict_entries (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        scope_digest TEXT NOT NULL,
        end_digest TEXT,
        provider TEXT NOT NULL,
        model TEXT NOT NULL,
        reasoning TEXT NOT NULL,
        text_digest TEXT NOT NULL,
        chars INTEGER NOT NULL CHECK (chars >= 0),
        created_at DOUBLE PRECISION NOT NULL,
        touched_at DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    )""",
    """CREATE UNIQUE INDEX strict_entries_by_end ON strict_entries (scope_digest, end_digest)
        WHERE end_digest IS NOT NULL""",
    "CREATE INDEX strict_entries_by_expiry ON strict_entries (expires_at)",
    "CREATE INDEX strict_entries_by_provider ON strict_entries (provider, model)",
    "CREATE INDEX strict_entries_by_model ON strict_entries (model)",
    """CREATE TABLE strict_tool_calls (
        scope_digest TEXT NOT NULL,
        tool_call_id TEXT NOT NULL,
        entry_id BIGINT NOT NULL REFERENCES strict_entries (id) ON DELETE CASCADE,
        ordinal INTEGER NOT NULL CHECK (ordinal >= 0),
        PRIMARY KEY (scope_digest, tool_call_id)
    )""",
    "CREATE INDEX strict_tool_calls_by_entry ON strict_tool_calls (entry_id)",
    "CREATE INDEX strict_tool_calls_by_id ON strict_tool_calls (tool_call_id)",
)

MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (_VERSION_1,)
SCHEMA_VERSION: Final = len(MIGRATIONS)

TABLES: Final = ("scopes", "observations", "payloads", "markers", "dependencies", "intents")


def found_version(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    """The database's schema version (0: none yet), or :class:`SchemaRefused` for a
    database with our tables' names but no version."""
    exists = conn.execute("SELECT to_regclass('relay_schema') IS NOT NULL").fetchone()
    if exists is not None and exists[0]:
        row = conn.execute("SELECT version FROM relay_schema").fetchone()
        return 0 if row is None else int(str(row[0]))
    taken = conn.execute(
        "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() "
        "AND tablename = ANY(%s)",
        (list(TABLES),),
    ).fetchone()
    if taken is not None and int(str(taken[0])):
        raise SchemaRefused("it has tables named like the relay's but no relay_schema version")
    return 0


def check_version(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    """The version found, or :class:`SchemaTooNew` (a newer relay wrote it)."""
    found = found_version(conn)
    if found > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"it was written by a newer relay (PostgreSQL schema version {found}; this relay "
            f"knows up to {SCHEMA_VERSION}); upgrade the relay"
        )
    return found


def migrate(conn: psycopg.Connection[tuple[object, ...]], version: int = SCHEMA_VERSION) -> int:
    """Bring the schema to ``version`` inside the caller's transaction (advisory-locked
    against another relay migrating at the same time); returns the version found."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
    found = check_version(conn)
    if found == 0:
        conn.execute("CREATE TABLE relay_schema (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO relay_schema (version) VALUES (0)")
    for steps in MIGRATIONS[found:version]:
        for step in steps:
            conn.execute(step.encode())  # constants of this module (bytes: no %-parsing)
    if found < version:
        conn.execute("UPDATE relay_schema SET version = %s", (version,))
    return found
