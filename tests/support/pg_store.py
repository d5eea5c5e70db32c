"""The shared PostgreSQL store for tests: open one on a test database (``pg_database``),
make a lease lapse without waiting for it, reconnect after an outage, and reach a cluster
over TCP through a forwarder that can go silent (tests/unit/storage/postgres,
tests/integration/test_shared_store.py)."""

from __future__ import annotations

import contextlib
import socket
import threading

from relay.clock import ManualClock
from relay.core.records import EMPTY_PLAN
from relay.core.scope import ScopeTargeting
from relay.errors import StoreUnreachable
from relay.settings.database_url import parse_database_url
from relay.storage.postgres.connections import PROBE_CAP_S
from relay.storage.postgres.store import PostgresStore
from tests.support.pg_cluster import PgCluster, PgDatabase

TARGET = ScopeTargeting(credential="cred-fp", model="gpt-5", caller=None)


def h(n: int) -> str:
    """A digest-shaped value (64 hex digits) made from ``n``."""
    return f"{n:064x}"


def open_pg(
    database: PgDatabase, clock: ManualClock | None = None, *, lease_ms: int = 30_000
) -> PostgresStore:
    """A relay instance's store on ``database`` (its own pool and lease)."""
    url = parse_database_url("REASONING_CACHE_URL", database.url)
    return PostgresStore.open(url, clock=clock or ManualClock(), lease_ms=lease_ms)


def lapse(database: PgDatabase, instance_id: str) -> None:
    """The lease of ``instance_id`` runs out now, by the database's clock (what a killed
    instance's lease does once its lease time has passed)."""
    with database.connect() as conn:
        conn.execute(
            "UPDATE instances SET expires_at = clock_timestamp() - interval '1 millisecond' "
            "WHERE id = %s",
            (instance_id,),
        )


def probe_now(store: PostgresStore, clock: ManualClock) -> None:
    """A store known to be down: let a probe fall due, start it with a caller (refused
    meanwhile, as every caller is while it runs) and wait for it to finish."""
    connections = store.connections
    assert connections is not None and connections.known_down
    clock.advance(PROBE_CAP_S)
    with contextlib.suppress(StoreUnreachable), store.transaction():
        pass
    assert connections.wait_probe(30)


def idle_payload(store: PostgresStore, n: int, *, scope_digest: str = h(1)) -> int:
    """Record an observation at position ``2n + 1`` with a payload last touched at 10.0 (idle
    for any cleanup cutoff above it) in the scope ``scope_digest``; its id."""
    scope = store.scope_for(scope_digest, TARGET).id
    with store.transaction():
        row = store.add_observation(
            scope_id=scope, generation=1, position=2 * n + 1, start_digest=h(n),
            end_digest=h(1000 + n), envelope_fingerprint=h(2000 + n),
            payload_fingerprint=h(3000 + n), output_hash=h(4000 + n),
            prior_plan=EMPTY_PLAN,
            intent_id=None, snapshot=None, replayable=True, now=10.0,
        )  # fmt: skip
        store.put_payload(row.id, "[]", 10.0)
    return row.id


class SilentForwarder:
    """127.0.0.1 TCP to a cluster's Unix socket, until :meth:`go_silent`: then the
    connections it carried are cut and new ones are accepted and never answered (what a
    relay sees of a database host that starts dropping packets: no refusal, no reply)."""

    def __init__(self, cluster: PgCluster) -> None:
        self._target = str(cluster.root / f".s.PGSQL.{cluster.port}")
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port: int = self._listener.getsockname()[1]
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self.silent = False
        threading.Thread(target=self._accept, name="pg-forwarder", daemon=True).start()

    def url(self, dbname: str) -> str:
        return (f"postgresql://relay@127.0.0.1:{self.port}/{dbname}"
                "?sslmode=disable&gssencmode=disable")  # fmt: skip

    def go_silent(self) -> None:
        with self._lock:
            self.silent = True
            cut, self._open = self._open, []
        for sock in cut:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self._listener.close()
        self.go_silent()

    def __enter__(self) -> SilentForwarder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                self._open.append(client)  # silent: held open, never answered
                if self.silent:
                    continue
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self._target)
            with self._lock:
                self._open.append(server)
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
