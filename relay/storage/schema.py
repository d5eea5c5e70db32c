"""The replay store's SQLite schema and its migrations (design §6).

``PRAGMA user_version`` is the schema version: ``MIGRATIONS[k]`` takes a database from
version ``k`` to ``k + 1`` (SQL statements, and Python steps where rows must be
rewritten), and :func:`migrate` applies every pending step inside the caller's open
transaction, so a crash mid-migration leaves the old version intact.
``PRAGMA application_id`` marks the file as ours, so an unrelated SQLite database is
refused instead of having tables added to it.

Statements are listed one by one rather than run as a script: ``executescript`` would
commit the surrounding transaction first.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final, TypeVar

from relay.errors import OperatorError
from relay.storage.ancestry_migration import migrate_to_links

APPLICATION_ID: Final = 0x52525231  # "RRR1"

_VERSION_1: Final = (
    # Small key/value facts: the cache-local secret, opened_at, coverage-gap.
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value ANY) STRICT",
    """CREATE TABLE scopes (
        id INTEGER PRIMARY KEY,
        digest TEXT NOT NULL UNIQUE,
        generation INTEGER NOT NULL DEFAULT 1 CHECK (generation >= 1),
        credential TEXT NOT NULL,
        model TEXT NOT NULL,
        caller TEXT,
        latest_snapshot TEXT,
        created_at REAL NOT NULL
    ) STRICT""",
    "CREATE INDEX scopes_by_target ON scopes (credential, model, caller)",
    # AUTOINCREMENT: an id is never reused, so a cached object keyed by id stays valid.
    # intent_id is deliberately not a foreign key: it outlives the intent row.
    """CREATE TABLE observations (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        scope_id INTEGER NOT NULL REFERENCES scopes (id),
        generation INTEGER NOT NULL,
        position INTEGER NOT NULL CHECK (position >= 0),
        start_digest TEXT NOT NULL,
        end_digest TEXT NOT NULL,
        envelope_fp TEXT NOT NULL,
        payload_fp TEXT NOT NULL,
        output_hash TEXT NOT NULL,
        prior_plan TEXT NOT NULL,
        prior_plan_count INTEGER NOT NULL CHECK (prior_plan_count >= 0),
        intent_id TEXT,
        snapshot TEXT,
        replayable INTEGER NOT NULL CHECK (replayable IN (0, 1)),
        observed_at REAL NOT NULL
    ) STRICT""",
    "CREATE INDEX observations_by_end ON observations (scope_id, end_digest)",
    "CREATE INDEX observations_by_start ON observations (scope_id, start_digest)",
    "CREATE INDEX observations_by_snapshot ON observations (scope_id, snapshot, observed_at)",
    """CREATE TABLE payloads (
        observation_id INTEGER PRIMARY KEY REFERENCES observations (id) ON DELETE CASCADE,
        output_json TEXT NOT NULL,
        size INTEGER NOT NULL CHECK (size >= 0),
        touched_at REAL NOT NULL
    ) STRICT""",
    "CREATE INDEX payloads_by_touch ON payloads (touched_at)",
    # No generation column: markers apply across generations (design §4).
    """CREATE TABLE markers (
        scope_id INTEGER NOT NULL REFERENCES scopes (id),
        kind TEXT NOT NULL CHECK (kind IN ('start_poison', 'end_conflict')),
        digest TEXT NOT NULL,
        position INTEGER NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (scope_id, kind, digest)
    ) STRICT, WITHOUT ROWID""",
    """CREATE TABLE intents (
        id TEXT PRIMARY KEY,
        scope_id INTEGER NOT NULL REFERENCES scopes (id),
        phase TEXT NOT NULL CHECK (phase IN ('dispatch', 'delivery')),
        position INTEGER NOT NULL,
        start_digest TEXT NOT NULL,
        prior_plan TEXT NOT NULL,
        prior_plan_count INTEGER NOT NULL CHECK (prior_plan_count >= 0),
        created_at REAL NOT NULL,
        deadline_at REAL
    ) STRICT""",
    "CREATE INDEX intents_by_start ON intents (scope_id, start_digest)",
    # Retained ancestry (observation holder) and active pins (intent holder).
    """CREATE TABLE dependencies (
        observation_id INTEGER REFERENCES observations (id),
        intent_id TEXT REFERENCES intents (id) ON DELETE CASCADE,
        ancestor_id INTEGER NOT NULL REFERENCES observations (id),
        CHECK ((observation_id IS NULL) <> (intent_id IS NULL))
    ) STRICT""",
    """CREATE UNIQUE INDEX dependencies_of_observation
        ON dependencies (observation_id, ancestor_id) WHERE observation_id IS NOT NULL""",
    """CREATE UNIQUE INDEX dependencies_of_intent
        ON dependencies (intent_id, ancestor_id) WHERE intent_id IS NOT NULL""",
    "CREATE INDEX dependencies_by_ancestor ON dependencies (ancestor_id)",
)

# Strict Chat providers (relay.strict): reasoning_content records, keyed by the visible-
# history identity of the assistant message (end_digest, NULL when the client's next
# envelope could not be predicted) and indexed by every tool-call id. Times are wall-clock
# seconds; expires_at slides forward on use. text_digest is SHA-256 of the UTF-8 text.
_VERSION_2: Final = (
    """CREATE TABLE strict_entries (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        scope_digest TEXT NOT NULL,
        end_digest TEXT,
        provider TEXT NOT NULL,
        model TEXT NOT NULL,
        reasoning TEXT NOT NULL,
        text_digest TEXT NOT NULL,
        chars INTEGER NOT NULL CHECK (chars >= 0),
        created_at REAL NOT NULL,
        touched_at REAL NOT NULL,
        expires_at REAL NOT NULL
    ) STRICT""",
    """CREATE UNIQUE INDEX strict_entries_by_end ON strict_entries (scope_digest, end_digest)
        WHERE end_digest IS NOT NULL""",
    "CREATE INDEX strict_entries_by_expiry ON strict_entries (expires_at)",
    "CREATE INDEX strict_entries_by_provider ON strict_entries (provider, model)",
    "CREATE INDEX strict_entries_by_model ON strict_entries (model)",
    "CREATE INDEX strict_entries_by_created ON strict_entries (created_at)",
    """CREATE TABLE strict_tool_calls (
        scope_digest TEXT NOT NULL,
        tool_call_id TEXT NOT NULL,
        entry_id INTEGER NOT NULL REFERENCES strict_entries (id) ON DELETE CASCADE,
        ordinal INTEGER NOT NULL CHECK (ordinal >= 0),
        PRIMARY KEY (scope_digest, tool_call_id)
    ) STRICT, WITHOUT ROWID""",
    "CREATE INDEX strict_tool_calls_by_entry ON strict_tool_calls (entry_id)",
    "CREATE INDEX strict_tool_calls_by_id ON strict_tool_calls (tool_call_id)",
)

# Ancestors are read by reference without their plan's text (up to 33 KB in the middle of
# the row, so reading any column after it walks its overflow pages): each row records its
# plan's digest (SHA-256 of the text, backfilled here; dropped again in v5), and an index
# covering every other column answers the by-reference read alone. It also serves every
# (scope_id, end_digest) lookup the index it replaces did.
_VERSION_3: Final = (
    "ALTER TABLE observations ADD COLUMN prior_plan_digest TEXT NOT NULL DEFAULT ''",
    "UPDATE observations SET prior_plan_digest = relay_plan_digest(prior_plan)",
    "DROP INDEX observations_by_end",
    """CREATE INDEX observations_by_ref ON observations (scope_id, end_digest, payload_fp,
        id, generation, position, start_digest, envelope_fp, output_hash, prior_plan_digest,
        prior_plan_count, intent_id, snapshot, replayable, observed_at)""",
)

# A third marker kind, end_rejected: the upstream refused the block replayed for that visible
# message (relay.core.rejection). SQLite cannot alter a CHECK, so the table is rebuilt
# with its rows; markers have no dependants.
_VERSION_4: Final = (
    """CREATE TABLE markers_v4 (
        scope_id INTEGER NOT NULL REFERENCES scopes (id),
        kind TEXT NOT NULL CHECK (kind IN ('start_poison', 'end_conflict', 'end_rejected')),
        digest TEXT NOT NULL,
        position INTEGER NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (scope_id, kind, digest)
    ) STRICT, WITHOUT ROWID""",
    """INSERT INTO markers_v4 (scope_id, kind, digest, position, created_at)
        SELECT scope_id, kind, digest, position, created_at FROM markers""",
    "DROP TABLE markers",
    "ALTER TABLE markers_v4 RENAME TO markers",
)

# Linear ancestry (relay.storage.ancestry_migration): a record links to its plan's last
# block and keeps the plan's chain digest instead of its whole text, and observations
# hold no dependencies rows any more (intents still pin through them). The parent index
# answers "which records were generated on top of this one" (retention).
_VERSION_5: Final = (
    "ALTER TABLE observations ADD COLUMN parent_id INTEGER REFERENCES observations (id)",
    "ALTER TABLE observations ADD COLUMN prior_chain TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE intents ADD COLUMN parent_id INTEGER",
    "ALTER TABLE intents ADD COLUMN prior_chain TEXT NOT NULL DEFAULT ''",
    migrate_to_links,
    "DELETE FROM dependencies WHERE observation_id IS NOT NULL",
    "DROP INDEX observations_by_ref",
    "ALTER TABLE observations DROP COLUMN prior_plan_digest",
    "ALTER TABLE observations DROP COLUMN prior_plan",
    "ALTER TABLE intents DROP COLUMN prior_plan",
    "CREATE INDEX observations_by_end ON observations (scope_id, end_digest)",
    "CREATE INDEX observations_by_parent ON observations (parent_id) WHERE parent_id IS NOT NULL",
)

# Reclaimed payloads are told apart from lost ones (relay cache verify, design §6): cleanup
# sets reclaimed_at (wall time) in the transaction that deletes the payload. v5 kept no
# such mark, so a payload already gone from a replayable record when the store reaches v6
# gets RECLAIMED_BEFORE_V6: most likely cleanup, but nobody can prove it any more.
RECLAIMED_BEFORE_V6: Final = -1.0
_VERSION_6: Final = (
    "ALTER TABLE observations ADD COLUMN reclaimed_at REAL",
    f"""UPDATE observations SET reclaimed_at = {RECLAIMED_BEFORE_V6!r} WHERE replayable = 1
        AND NOT EXISTS (SELECT 1 FROM payloads WHERE observation_id = observations.id)""",  # noqa: S608
)

# Dead schema dropped. Since v5 no dependencies row is held by an observation, so
# observation_id is always NULL: the table is rebuilt with the intent pins only (SQLite
# cannot drop a column named in a foreign key, a CHECK or an index). An intent's plan
# (parent_id, prior_plan_count, prior_chain) was written and never read: startup recovery
# poisons an open intent's position whatever its plan was. deadline_at was diagnostic
# metadata nothing read. strict_entries_by_created served no query (EXPLAIN QUERY PLAN of
# relay.storage.strict_store's statements) and cost every insert. Opening a store that
# this step migrated runs VACUUM once, after the migration committed (VACUUM_PENDING_KEY).
_VERSION_7: Final = (
    """CREATE TABLE dependencies_v7 (
        intent_id TEXT NOT NULL REFERENCES intents (id) ON DELETE CASCADE,
        ancestor_id INTEGER NOT NULL REFERENCES observations (id)
    ) STRICT""",
    """INSERT INTO dependencies_v7 (intent_id, ancestor_id)
        SELECT intent_id, ancestor_id FROM dependencies WHERE intent_id IS NOT NULL""",
    "DROP TABLE dependencies",
    "ALTER TABLE dependencies_v7 RENAME TO dependencies",
    "CREATE UNIQUE INDEX dependencies_of_intent ON dependencies (intent_id, ancestor_id)",
    "CREATE INDEX dependencies_by_ancestor ON dependencies (ancestor_id)",
    "ALTER TABLE intents DROP COLUMN parent_id",
    "ALTER TABLE intents DROP COLUMN prior_plan_count",
    "ALTER TABLE intents DROP COLUMN prior_chain",
    "ALTER TABLE intents DROP COLUMN deadline_at",
    "DROP INDEX strict_entries_by_created",
)

Step = str | Callable[[sqlite3.Connection], None]
MIGRATIONS: Final[tuple[tuple[Step, ...], ...]] = (
    _VERSION_1, _VERSION_2, _VERSION_3, _VERSION_4, _VERSION_5, _VERSION_6, _VERSION_7,
)  # fmt: skip
SCHEMA_VERSION: Final = len(MIGRATIONS)

# The versions whose step drops stored data (rows, columns, an index): a file migrated
# through one is left with free pages, which the store reclaims with one VACUUM after the
# migration committed (VACUUM cannot run inside a transaction). The migration's own
# transaction records VACUUM_PENDING_KEY in meta; the store deletes it once VACUUM is
# done, so a crash in between only leaves the free pages for the next start to reclaim.
DROPS_DATA: Final = frozenset({5, 7})
VACUUM_PENDING_KEY: Final = "vacuum-pending"

TABLES: Final = ("scopes", "observations", "payloads", "markers", "dependencies", "intents")


class SchemaRefused(OperatorError):
    """The file is SQLite but not a reasoning cache this code may use; the message says why."""


class SchemaTooNew(SchemaRefused):
    """A reasoning cache, written by a newer relay."""


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the schema to :data:`SCHEMA_VERSION` inside the caller's transaction.

    Returns the version found. A migration through a step that dropped data
    (:data:`DROPS_DATA`) leaves :data:`VACUUM_PENDING_KEY` in meta, for the caller to
    VACUUM once it committed. Raises :class:`SchemaRefused` for a newer schema or a
    foreign database; ``sqlite3.Error`` propagates for the caller to translate.
    """
    found = check_version(conn)
    migrate_to(conn, SCHEMA_VERSION, found)
    # A new file too: its tables were made by the same steps, drops included.
    if DROPS_DATA.intersection(range(found + 1, SCHEMA_VERSION + 1)):
        conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, 1) ON CONFLICT (key) DO NOTHING",
            (VACUUM_PENDING_KEY,),
        )
    return found


def check_version(conn: sqlite3.Connection) -> int:
    """The file's schema version, or :class:`SchemaRefused` when this code may not use it
    (a foreign database, a newer schema); changes nothing."""
    found = int(conn.execute("PRAGMA user_version").fetchone()[0])
    application_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
    if application_id not in (0, APPLICATION_ID):
        raise SchemaRefused("it is a SQLite database of another application")
    if found > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"it was written by a newer relay (schema version {found}; this relay knows "
            f"up to {SCHEMA_VERSION}); upgrade the relay"
        )
    if found == 0 and conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
        raise SchemaRefused("it has tables but no reasoning-cache schema version")
    return found


def migrate_to(conn: sqlite3.Connection, version: int, found: int | None = None) -> None:
    """Apply the steps from the file's version (``found``) up to ``version`` (tests build
    files of an earlier version with it) and record ``version``."""
    if found is None:
        found = int(conn.execute("PRAGMA user_version").fetchone()[0])
    conn.create_function("relay_plan_digest", 1, _legacy_plan_digest, deterministic=True)
    for steps in MIGRATIONS[found:version]:
        for step in steps:
            if isinstance(step, str):
                conn.execute(step)
            else:
                step(conn)
    if found < version:
        # PRAGMAs take no parameters; both values are integers from this module.
        conn.execute(f"PRAGMA user_version = {version:d}")
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID:d}")


def _legacy_plan_digest(text: str) -> str:
    """The v3 backfill of ``prior_plan_digest``: SHA-256 of a v3 plan's text."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


_T = TypeVar("_T")
IN_CHUNK: Final = 500  # bound on "IN (?, ...)" lists


def in_batches(values: Iterable[_T], size: int = IN_CHUNK) -> Iterator[list[_T]]:
    """``values`` in lists of at most ``size``, for ``IN (...)`` queries (or multi-row
    ``VALUES`` lists, with ``size`` divided by the parameters per row)."""
    batch: list[_T] = []
    for value in values:
        batch.append(value)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def placeholders(count: int) -> str:
    """``?, ?, ...`` for ``count`` bound parameters."""
    return ", ".join("?" * count)


# Markers or open intents of one scope read whole rather than matched through IN lists.
FEW: Final = 64


def matching(
    conn: sqlite3.Connection, select: str, params: tuple[Any, ...], column: str,
    values: Iterable[str],
) -> list[Any]:  # fmt: skip
    """The rows of ``select`` (one scope's markers or intents) whose ``column``, their first,
    is in ``values``. A scope has few of them: reading them all at once is cheaper than
    matching a plan's digests in IN lists; more than ``FEW`` fall back to the lists."""
    wanted = dict.fromkeys(values)
    every = conn.execute(f"{select} LIMIT ?", (*params, FEW + 1)).fetchall()
    if len(every) <= FEW:
        return [row for row in every if row[0] in wanted]
    rows: list[Any] = []
    for batch in in_batches(wanted):
        sql = f"{select} AND {column} IN ({placeholders(len(batch))})"
        rows += conn.execute(sql, (*params, *batch))
    return rows
