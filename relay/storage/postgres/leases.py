"""Instance leases on the shared store (design, "Team deployment: guarantee by guarantee").

Every relay process holds one row in ``instances``. Its expiry is set by the database's
clock (``clock_timestamp()``), never the relay's, so instances whose clocks disagree still
agree on whose lease has lapsed. A heartbeat renews it only while it has not lapsed: a
relay that finds its lease gone (paused, partitioned) registers again under a new id,
as a new instance. Intents name their instance; when a lease lapses, any live instance
poisons and removes that instance's unresolved intents (:func:`recover_lapsed`) — what
startup recovery does for the single-process store.

The functions take a connection; :class:`Leases`, the store's lease gateway, runs them
through :class:`~relay.storage.postgres.database.Database` (its transactions and error
translation) and keeps this process's lease state.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import psycopg

from relay.core.records import MarkerKind
from relay.storage.postgres.database import Database

Conn = psycopg.Connection[tuple[Any, ...]]


@dataclass(frozen=True)
class InstanceLease:
    """A live instance as ``relay status`` and /metrics show it (no secret in it)."""

    id: str
    host: str
    pid: int
    started_at: float  # the database's clock, epoch seconds
    expires_in_s: float  # by the database's clock at the read
    barrier_open: bool  # its retention barrier lets cleanup delete

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "startedAt": self.started_at,
            "leaseExpiresInSeconds": round(self.expires_in_s, 3),
            "barrierOpen": self.barrier_open,
        }


def _interval(lease_ms: int) -> str:
    return f"{lease_ms / 1000.0:.3f}"


def register(conn: Conn, lease_ms: int) -> str:
    """A new instance row with a fresh lease; its id (its retention barrier: shut)."""
    instance_id = "inst_" + secrets.token_hex(8)
    conn.execute(
        "INSERT INTO instances (id, host, pid, started_at, renewed_at, expires_at) "
        "VALUES (%s, %s, %s, clock_timestamp(), clock_timestamp(), "
        "clock_timestamp() + make_interval(secs => %s::float8))",
        (instance_id, socket.gethostname()[:255], os.getpid(), _interval(lease_ms)),
    )
    return instance_id


def renew(conn: Conn, instance_id: str, lease_ms: int, barrier_cutoff: float | None) -> bool:
    """Extend the lease unless it has already lapsed; publish the barrier's cutoff."""
    cursor = conn.execute(
        "UPDATE instances SET renewed_at = clock_timestamp(), "
        "expires_at = clock_timestamp() + make_interval(secs => %s::float8), "
        "barrier_cutoff = %s WHERE id = %s AND expires_at > clock_timestamp()",
        (_interval(lease_ms), barrier_cutoff, instance_id),
    )
    return cursor.rowcount == 1


def release(conn: Conn, instance_id: str) -> None:
    """At shutdown: the lease lapses now, so a survivor recovers what is left at once."""
    conn.execute(
        "UPDATE instances SET expires_at = clock_timestamp() WHERE id = %s", (instance_id,)
    )


LockScopes = Callable[[Conn, Iterable[int]], list[int]]


def recover_lapsed(conn: Conn, lock_scopes: LockScopes, now: float) -> int:
    """Inside the store's transaction: poison the start of every unresolved intent of
    each lapsed instance, remove those intents and the lapsed rows; how many intents.

    Lock order (design §22, 2): scopes first, all at once in id order (``lock_scopes``:
    :meth:`Database.lock_scopes`), then lease rows. The request path takes them in that
    order (its scope, then the share lock its intent insert takes on its own lease row),
    so recovery must too: locking the lapsed rows first, it could hold the row an intent
    insert that passed its lease check an instant earlier waits for, while waiting for
    that insert's scope (``deadlock_detected``). The rows are then locked ``FOR UPDATE
    SKIP LOCKED`` (an insert still holding its share lock keeps its instance for the
    next pass; two survivors split the work), so no intent of a recovered instance
    commits after it was read. An intent that committed between the first read and the
    row lock, in a scope not held, leaves its instance to the next pass as well."""
    candidates = [
        row[0]
        for row in conn.execute("SELECT id FROM instances WHERE expires_at <= clock_timestamp()")
    ]
    if not candidates:
        return 0
    held = set(lock_scopes(conn, _scopes_of(conn, "instance_id", candidates)))
    lapsed = [
        row[0]
        for row in conn.execute(
            "SELECT id FROM instances WHERE id = ANY(%s) AND expires_at <= clock_timestamp() "
            "ORDER BY id FOR UPDATE SKIP LOCKED",
            (candidates,),
        )
    ]
    intents = _open_intents(conn, "instance_id", lapsed)
    late = {owner for _, scope, _, _, owner in intents if scope not in held}
    lapsed = [instance for instance in lapsed if instance not in late]
    recovered = _poison_and_remove(conn, [i for i in intents if i[4] not in late], now)
    conn.execute("DELETE FROM instances WHERE id = ANY(%s)", (lapsed,))
    return recovered


def poison_intents(conn: Conn, lock_scopes: LockScopes, intent_ids: list[str], now: float) -> int:
    """Inside the store's transaction: poison the start of each of these intents still
    open and remove them (this instance's own, whose resolution failed while the database
    was down); how many were still open. Their scopes are locked first, in id order, and
    the intents read again under the locks (one resolved meanwhile is not poisoned)."""
    lock_scopes(conn, _scopes_of(conn, "id", intent_ids))
    return _poison_and_remove(conn, _open_intents(conn, "id", intent_ids), now)


def _scopes_of(conn: Conn, column: Literal["id", "instance_id"], values: list[str]) -> list[int]:
    """The scopes of the intents whose ``column`` is one of ``values`` (unlocked)."""
    return [
        row[0]
        for row in conn.execute(
            f"SELECT DISTINCT scope_id FROM intents WHERE {column} = ANY(%s)".encode(),  # noqa: S608
            (values,),
        )
    ]


def _open_intents(
    conn: Conn, column: Literal["id", "instance_id"], values: list[str]
) -> list[tuple[str, int, str, int, str]]:
    """(id, scope, start, position, instance) of the intents whose ``column`` is one of
    ``values``."""
    if not values:
        return []
    return conn.execute(
        f"SELECT id, scope_id, start_digest, position, instance_id FROM intents WHERE {column} = ANY(%s)".encode(),  # noqa: S608, E501
        (values,),
    ).fetchall()


def _poison_and_remove(
    conn: Conn, intents: list[tuple[str, int, str, int, str]], now: float
) -> int:
    """Poison the start of each of ``intents`` (their scopes held) and delete them; how
    many."""
    with conn.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO markers (scope_id, kind, digest, position, created_at) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            [(scope, MarkerKind.START_POISON.value, start, position, now)
             for _, scope, start, position, _ in intents],
        )  # fmt: skip
    conn.execute("DELETE FROM intents WHERE id = ANY(%s)", ([i[0] for i in intents],))
    return len(intents)


def live(conn: Conn) -> list[InstanceLease]:
    """The instances whose lease has not lapsed, oldest first."""
    rows = conn.execute(
        "SELECT id, host, pid, extract(epoch FROM started_at)::float8, "
        "extract(epoch FROM expires_at - clock_timestamp())::float8, "
        "barrier_cutoff IS NOT NULL FROM instances "
        "WHERE expires_at > clock_timestamp() ORDER BY started_at, id"
    ).fetchall()
    return [InstanceLease(*row) for row in rows]


def shared_cutoff(conn: Conn, instance_id: str, own: float) -> float | None:
    """The most conservative retention cutoff of the live instances (``None``: one of
    them keeps its deletion barrier shut), publishing this instance's ``own`` first."""
    conn.execute("UPDATE instances SET barrier_cutoff = %s WHERE id = %s", (own, instance_id))
    row = conn.execute(
        "SELECT bool_or(barrier_cutoff IS NULL), min(barrier_cutoff) FROM instances "
        "WHERE expires_at > clock_timestamp() OR id = %s",
        (instance_id,),
    ).fetchone()
    if row is None or row[0]:
        return None
    return min(own, float(row[1])) if row[1] is not None else own


class Leases:
    """This process's lease on the shared store (``PostgresStore``'s lease methods) and
    the intents it could not resolve while the database was away."""

    def __init__(self, db: Database, *, lease_ms: int) -> None:
        self._db = db
        self.lease_ms = lease_ms
        self.instance_id = ""  # set by register(); a new one after a lapse
        self.lease_lapses = 0  # times this process found its lease gone and came back new
        self.barrier_cutoff: float | None = None  # published with each heartbeat
        # Intents whose resolution did not commit (the database went away): poisoned and
        # removed by recover_abandoned once it is back, not when this instance dies.
        self.abandoned: set[str] = set()
        self.abandoned_recovered = 0

    def register(self) -> None:
        """Take a new lease (a new instance id): at startup and after a lapse."""
        with self._db.read("register a lease") as conn:
            self.instance_id = register(conn, self.lease_ms)

    def heartbeat(self) -> bool:
        """Renew this instance's lease and publish its barrier; ``False`` when it had
        lapsed (the instance registered again as new)."""
        with self._db.read("renew the lease") as conn:
            alive = renew(conn, self.instance_id, self.lease_ms, self.barrier_cutoff)
        if not alive:
            self.lease_lapses += 1
            self.register()
        return alive

    def recover_lapsed(self, now: float) -> int:
        """Poison and remove the unresolved intents of every instance whose lease lapsed,
        and their lease rows (the shared-store analogue of startup recovery)."""
        with self._db.transaction(), self._db.write("recover lapsed leases") as conn:
            return recover_lapsed(conn, self._db.lock_scopes, now)

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
        with self._db.transaction(), self._db.write("recover abandoned intents") as conn:
            found = poison_intents(conn, self._db.lock_scopes, wanted, now)
        self.abandoned.difference_update(wanted)
        self.abandoned_recovered += found
        return found

    def live_instances(self) -> list[InstanceLease]:
        with self._db.read("read leases") as conn:
            return live(conn)

    def release(self, conn: Conn) -> None:
        """At shutdown (best effort: :meth:`Database.close`)."""
        release(conn, self.instance_id)
