"""The store's connections (relay.storage.postgres.connections): reused while they work,
a connection the server closed while idle found before use, and no waiting for a
background reconnection once the server is back."""

from __future__ import annotations

import psycopg
import pytest

from relay.storage.postgres.connections import Connections, usable
from tests.support.pg_cluster import PgCluster, PgDatabase


def test_an_idle_connection_is_reused_and_a_terminated_one_replaced(
    pg_database: PgDatabase,
) -> None:
    connections = Connections(pg_database.url, connect_timeout=2)
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
    connections = Connections(pg_database.url, connect_timeout=2)
    try:
        with connections.connection() as conn:
            conn.execute("BEGIN")
        with connections.connection() as other:
            assert other is not conn
        assert conn.closed
    finally:
        connections.close()


def test_the_first_request_after_a_restart_connects(own_pg_cluster: PgCluster) -> None:
    database = PgDatabase(own_pg_cluster, own_pg_cluster.create_database())
    connections = Connections(database.url, connect_timeout=2)
    try:
        with connections.connection() as conn:
            conn.execute("SELECT 1")
        own_pg_cluster.stop()
        with pytest.raises(psycopg.OperationalError), connections.connection():
            pass
        own_pg_cluster.start()
        with connections.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        connections.close()
