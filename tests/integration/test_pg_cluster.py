"""The throwaway PostgreSQL cluster of tests/support/pg_cluster.py: where it listens, who
runs it, fresh databases, durability across a fast restart and a crash, a role that needs
its password; and the pure parts (finding the programs, sweeping a killed run's cluster)."""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

import pytest

from tests.support.pg_cluster import (
    OS_USER,
    PROGRAMS,
    TEMP_MARKER,
    PgCluster,
    PgDatabase,
    bin_dir,
    sweep_stale,
)

psycopg = pytest.importorskip("psycopg")


def owner_uid(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    (line,) = (line for line in status.splitlines() if line.startswith("Uid:"))
    return int(line.split()[1])


def test_listens_only_on_its_socket_as_a_non_root_user(pg_database: PgDatabase) -> None:
    cluster = pg_database.cluster
    with pg_database.connect() as conn:
        (listen,) = conn.execute("SHOW listen_addresses").fetchone() or (None,)
        (address,) = conn.execute("SELECT inet_server_addr()").fetchone() or ("?",)
        (fsync,) = conn.execute("SHOW fsync").fetchone() or (None,)
    assert listen == ""  # no TCP listener at all
    assert address is None  # this connection came over the Unix socket
    assert fsync == "on"
    assert (cluster.root / f".s.PGSQL.{cluster.port}").is_socket()
    pid = cluster.postmaster_pid()
    assert pid is not None
    if os.geteuid() == 0:
        assert owner_uid(pid) == pwd.getpwnam(OS_USER).pw_uid != 0
    assert "password" not in pg_database.url  # trust on the socket: nothing secret in it


def test_each_test_gets_a_fresh_database(pg_cluster: PgCluster) -> None:
    first, second = pg_cluster.create_database(), pg_cluster.create_database()
    try:
        assert first != second
        with pg_cluster.connect(first) as conn:
            conn.execute("CREATE TABLE t (x int)")
        with pg_cluster.connect(second) as conn:
            tables = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
            ).fetchone()
        assert tables == (0,)
    finally:
        pg_cluster.drop_database(first)
        pg_cluster.drop_database(second)
    with pg_cluster.connect() as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_database WHERE datname = ANY(%s)", ([first, second],)
        ).fetchone()
    assert left == (0,)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_committed_rows_survive_a_restart_and_a_crash(pg_database: PgDatabase, mode: str) -> None:
    cluster = pg_database.cluster
    with pg_database.connect() as conn:
        conn.execute("CREATE TABLE t (x int)")
        conn.execute("INSERT INTO t VALUES (1)")
        open_tx = pg_database.connect()
        open_tx.autocommit = False
        open_tx.execute("INSERT INTO t VALUES (2)")  # never committed
        cluster.stop(mode)
        assert cluster.postmaster_pid() is None
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")  # the server is gone: a client sees it at once
        open_tx.close()
    with pytest.raises(psycopg.OperationalError):
        pg_database.connect()
    cluster.start()
    assert cluster.running
    with pg_database.connect() as conn:
        assert conn.execute("SELECT x FROM t ORDER BY x").fetchall() == [(1,)]


def test_a_role_with_a_password_needs_it(
    pg_database: PgDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = pg_database.cluster
    monkeypatch.delenv("PGPASSWORD", raising=False)
    cluster.create_role("alice_t", "correct-horse-battery")
    try:
        url = cluster.url(pg_database.name, user="alice_t")
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(url, connect_timeout=10).close()
        monkeypatch.setenv("PGPASSWORD", "correct-horse-battery")  # libpq reads it
        with psycopg.connect(url, connect_timeout=10) as conn:
            assert conn.execute("SELECT current_user").fetchone() == ("alice_t",)
    finally:
        with cluster.connect() as conn:
            conn.execute("DROP OWNED BY alice_t")
            conn.execute("DROP ROLE alice_t")


def make_programs(directory: Path, programs: tuple[str, ...]) -> None:
    directory.mkdir(parents=True)
    for program in programs:
        (directory / program).write_text("#!/bin/sh\n", encoding="utf-8")
        (directory / program).chmod(0o755)


def test_programs_are_found_off_path_newest_complete_version_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    make_programs(tmp_path / "9.6" / "bin", PROGRAMS)
    make_programs(tmp_path / "15" / "bin", PROGRAMS)
    make_programs(tmp_path / "16" / "bin", ("initdb", "pg_ctl"))  # its server is missing
    assert bin_dir(str(tmp_path / "*" / "bin")) == tmp_path / "15" / "bin"
    assert bin_dir(str(tmp_path / "none" / "*" / "bin")) is None


def test_programs_on_path_are_followed_to_their_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_programs(tmp_path / "14" / "bin", PROGRAMS)
    make_programs(tmp_path / "15" / "bin", PROGRAMS)
    (tmp_path / "path").mkdir()
    (tmp_path / "path" / "pg_ctl").symlink_to(tmp_path / "14" / "bin" / "pg_ctl")
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    assert bin_dir(str(tmp_path / "*" / "bin")) == tmp_path / "14" / "bin"


def test_a_killed_runs_cluster_is_swept_and_a_live_runs_is_kept(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: its pid names no process
    dead = tmp_path / f"{TEMP_MARKER}{gone.pid}-abc"
    alive = tmp_path / f"{TEMP_MARKER}{os.getpid()}-def"
    for root in (dead, alive):
        (root / "data").mkdir(parents=True)
    assert sweep_stale(tmp_path) == [dead]
    assert not dead.exists()
    assert alive.exists()
