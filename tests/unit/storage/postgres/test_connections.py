"""The store's connections (relay.storage.postgres.connections): reused while they work,
a connection the server closed while idle found before use, a database known to be down
refused without a connect attempt, probed at most once per (capped, doubling) interval off
the caller's thread, and served again as soon as a probe reaches it."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from relay.clock import ManualClock
from relay.storage.postgres.connections import (
    PROBE_CAP_S,
    PROBE_FIRST_S,
    TCP_DEFAULTS,
    Connections,
    StoreDown,
    usable,
    with_tcp_defaults,
)
from tests.support.pg_cluster import PgCluster, PgDatabase

# No server behind this socket directory: every connect fails at once.
NOWHERE = "host=/nonexistent-relay-test-socket-dir port=5 dbname=x user=x"


@pytest.fixture
def silent() -> Iterator[str]:
    """A server that accepts TCP connections into its backlog and never says a word (a
    host behind a firewall that drops packets looks the same to libpq: no answer until
    ``connect_timeout``); its conninfo."""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as listener:
        port = listener.getsockname()[1]
        yield f"host=127.0.0.1 port={port} dbname=x user=x sslmode=disable gssencmode=disable"


def held(conninfo: str, clock: ManualClock) -> tuple[Connections, list[Callable[[], None]]]:
    """Connections whose probes are queued for the test to run (synchronously)."""
    probes: list[Callable[[], None]] = []
    return Connections(
        conninfo, connect_timeout=2, monotonic=clock.monotonic, spawn=probes.append
    ), probes


def refused(connections: Connections) -> bool:
    try:
        with connections.connection():
            return False
    except StoreDown:
        return True


def test_an_idle_connection_is_reused_and_a_terminated_one_replaced(
    pg_database: PgDatabase,
) -> None:
    connections = Connections(pg_database.url, connect_timeout=2, monotonic=ManualClock().monotonic)
    try:
        with connections.connection() as first:
            pid = first.info.backend_pid
        with connections.connection() as again:
            assert again is first and usable(again)
        with pg_database.connect() as admin:  # what a restart does to an idle connection
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            admin.execute("SELECT pg_sleep(0.1)")  # the backend's exit reaches the socket
        assert not usable(first)
        with connections.connection() as fresh:
            assert fresh is not first and fresh.info.backend_pid != pid
            assert fresh.execute("SELECT 1").fetchone() == (1,)
    finally:
        connections.close()


def test_a_connection_left_in_a_transaction_is_not_reused(pg_database: PgDatabase) -> None:
    connections = Connections(pg_database.url, connect_timeout=2, monotonic=ManualClock().monotonic)
    try:
        with connections.connection() as conn:
            conn.execute("BEGIN")
        with connections.connection() as other:
            assert other is not conn
        assert conn.closed
    finally:
        connections.close()


def test_a_burst_while_down_costs_no_connect_and_probes_are_spaced_and_capped() -> None:
    clock = ManualClock()
    connections, probes = held(NOWHERE, clock)
    with pytest.raises(psycopg.OperationalError) as first, connections.connection():
        pass
    assert not isinstance(first.value, StoreDown)  # the one real attempt found it down
    assert connections.known_down and connections.connect_attempts == 1
    assert all(refused(connections) for _ in range(100))
    assert connections.connect_attempts == 1 and probes == []
    step, gaps = 0.01, []
    for _probe in range(7):
        failed_at = clock.monotonic()
        while not probes:  # callers keep coming every 10 ms; one of them starts a probe
            clock.advance(step)
            assert refused(connections)
        assert refused(connections) and len(probes) == 1  # one probe at a time
        gaps.append(clock.monotonic() - failed_at)
        probes.pop()()  # the probe fails: the next one waits longer
    expected = [PROBE_FIRST_S, 0.2, 0.4, 0.8, PROBE_CAP_S, PROBE_CAP_S, PROBE_CAP_S]
    assert all(want <= gap < want + step + 1e-6 for gap, want in zip(gaps, expected, strict=True))
    assert connections.connect_attempts == 1 + 7  # the first, then one per probe


def test_a_probe_reconnects_after_a_restart_and_its_connection_serves(
    own_pg_cluster: PgCluster,
) -> None:
    database = PgDatabase(own_pg_cluster, own_pg_cluster.create_database())
    clock = ManualClock()
    connections, probes = held(database.url, clock)
    try:
        with connections.connection() as conn:
            conn.execute("SELECT 1")
        own_pg_cluster.stop()
        with pytest.raises(psycopg.OperationalError), connections.connection():
            pass
        own_pg_cluster.start()
        assert refused(connections)  # back, but not probed yet: no attempt on the caller
        clock.advance(PROBE_FIRST_S)
        assert refused(connections) and len(probes) == 1
        attempts = connections.connect_attempts
        probes.pop()()
        assert not connections.known_down and connections.connect_attempts == attempts + 1
        with connections.connection() as conn:  # the probe's connection, no new connect
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert connections.connect_attempts == attempts + 1
    finally:
        connections.close()


def test_a_probe_runs_off_the_callers_thread(own_pg_cluster: PgCluster) -> None:
    """The default ``spawn``: the caller is refused at once and the probe, in a thread,
    brings the connections back up."""
    database = PgDatabase(own_pg_cluster, own_pg_cluster.create_database())
    clock = ManualClock()
    own_pg_cluster.stop()
    connections = Connections(database.url, connect_timeout=2, monotonic=clock.monotonic)
    try:
        with pytest.raises(psycopg.OperationalError), connections.connection():
            pass
        own_pg_cluster.start()
        clock.advance(PROBE_CAP_S)
        assert refused(connections)
        assert connections.wait_probe(30) and not connections.known_down
        with connections.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        connections.close()


def test_a_silent_server_costs_a_caller_the_budget_not_the_connect_timeout(silent: str) -> None:
    """The caller is refused while its connect is still waiting for the server (so it did
    not wait for the 2 s connect_timeout); that connect becomes the probe, and callers
    meanwhile are refused without another attempt."""
    clock = ManualClock()
    probes: list[Callable[[], None]] = []
    connections = Connections(
        silent, connect_timeout=2, monotonic=clock.monotonic, spawn=probes.append, budget_s=0.05
    )
    with pytest.raises(StoreDown, match=r"did not answer within 0\.05 s"), connections.connection():
        pass
    assert not connections.wait_probe(0)  # the connect still waits for the server
    assert connections.known_down and connections.connect_attempts == 1
    clock.advance(PROBE_CAP_S)  # a probe would be due: the running connect is the probe
    assert refused(connections) and probes == []
    assert connections.wait_probe(30)  # libpq gave up (connect_timeout)
    assert connections.known_down and connections.connect_attempts == 1
    clock.advance(PROBE_CAP_S)
    assert refused(connections) and len(probes) == 1  # the next probe, as after any failure


@pytest.mark.parametrize(
    ("conninfo", "kept"),
    [
        ("host=db.internal dbname=relay user=relay", {}),
        (
            "postgresql://relay:secret@db.internal:5433/relay",
            {"password": "secret", "port": "5433"},
        ),
        ("host=db.internal dbname=relay keepalives_idle=30", {"keepalives_idle": "30"}),
        ("postgresql://db.internal/relay?tcp_user_timeout=0", {"tcp_user_timeout": "0"}),
    ],
)
def test_tcp_defaults_fill_only_what_the_conninfo_leaves_unset(
    conninfo: str, kept: dict[str, str]
) -> None:
    result = conninfo_to_dict(with_tcp_defaults(conninfo))
    assert result == {**conninfo_to_dict(conninfo), **TCP_DEFAULTS, **kept}


def test_a_connection_is_opened_with_the_tcp_defaults(pg_database: PgDatabase) -> None:
    connections = Connections(pg_database.url, connect_timeout=2, monotonic=ManualClock().monotonic)
    try:
        with connections.connection() as conn:
            options = {o.keyword.decode(): o.val for o in conn.pgconn.info}
    finally:
        connections.close()
    assert {k: (v or b"").decode() for k, v in options.items() if k in TCP_DEFAULTS} == TCP_DEFAULTS
