"""A throwaway PostgreSQL cluster the tests start themselves (a pytest plugin: the fixtures
``pg_cluster``, one per session, ``pg_database``, a fresh database per test, and
``own_pg_cluster``, a cluster of the test's own for the faults that stop or crash it).

``initdb`` into a temporary directory; the server listens on a Unix socket in that
directory and nowhere else (no TCP): relays and tests connect with a libpq URL that names
the socket directory. PostgreSQL refuses to run as root, so under root the cluster belongs
to a system user (:data:`OS_USER`, created once with ``useradd --system``) and its programs
run through ``runuser``. ``fsync`` stays on: the fault tests (a restart, a crash) are about
the relay's transactions being as durable as PostgreSQL promises, and the relay sets
``synchronous_commit`` itself; only ``initdb`` skips its syncs (a crash then loses nothing
a test relies on). Authentication is ``trust`` for the cluster's superuser on its socket
(the directory is the access control); :meth:`PgCluster.create_role` makes a role that
needs its password, for the tests of how a relay handles one.

What is missing (PostgreSQL's server programs, ``runuser``, psycopg) skips the tests that
need a cluster, naming it. A cluster left behind by a killed run (its directory names the
run's pid) is stopped and removed by the next session that starts one.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import quote

import pytest

from tests.support.processes import running

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import TupleRow

# Debian installs the server programs off PATH, one directory per major version.
PG_BIN_GLOB: Final = "/usr/lib/postgresql/*/bin"
PROGRAMS: Final = ("initdb", "pg_ctl", "postgres")
OS_USER: Final = "relaytest"  # owns clusters started by root (PostgreSQL refuses root)
SUPERUSER: Final = "relay"  # the cluster's superuser, as the relays connect
# The socket file is named after the port; with no TCP listener any number will do, and
# every cluster has its own directory.
PORT: Final = 5432
TEMP_MARKER: Final = "relay-pg-"
TIMEOUT_S: Final = 60.0
# Small and quiet: many clusters may run at once on a small machine.
SETTINGS: Final = {
    "listen_addresses": "''",
    "max_connections": "200",  # several relays, each with a pool, plus the test's own
    "shared_buffers": "'32MB'",
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
    "wal_level": "minimal",
    "max_wal_senders": "0",
    "log_min_messages": "warning",
    "log_line_prefix": "'%m [%p] '",
    "timezone": "'UTC'",
}


class ClusterError(RuntimeError):
    """A cluster program failed; the message holds its output and the server log's tail."""


def bin_dir(pattern: str = PG_BIN_GLOB) -> Path | None:
    """A directory holding every program of :data:`PROGRAMS` of one version: that of the
    ``pg_ctl`` on PATH (through its symlinks), else the newest of ``pattern``'s."""
    candidates: list[Path] = []
    if (on_path := shutil.which("pg_ctl")) is not None:
        candidates.append(Path(on_path).resolve().parent)
    versions = sorted(glob.glob(pattern), key=_version, reverse=True)
    candidates.extend(Path(d) for d in versions)
    for candidate in candidates:
        if all(os.access(candidate / program, os.X_OK) for program in PROGRAMS):
            return candidate
    return None


def _version(directory: str) -> tuple[int, ...]:
    name = Path(directory).parent.name
    return tuple(int(part) for part in name.split(".") if part.isdigit())


def unavailable() -> str | None:
    """Why no cluster can start here (naming what is missing), else ``None``."""
    if bin_dir() is None:
        return "PostgreSQL's initdb/pg_ctl/postgres not found (Debian package 'postgresql')"
    if os.geteuid() == 0 and (shutil.which("runuser") is None or shutil.which("useradd") is None):
        return "runuser/useradd not found (Debian packages 'util-linux', 'passwd')"
    try:
        import psycopg  # noqa: F401 - only to say whether it is there
    except ImportError:
        return "psycopg not installed (the 'postgres' extra: pip install -e '.[test]')"
    return None


def ensure_os_user() -> pwd.struct_passwd:
    """:data:`OS_USER`, created (a system user, no home, no shell) if it does not exist."""
    try:
        return pwd.getpwnam(OS_USER)
    except KeyError:
        pass
    created = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OS_USER],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
    )  # fmt: skip
    try:  # another run may have created it at the same moment: its user will do
        return pwd.getpwnam(OS_USER)
    except KeyError:
        raise ClusterError(f"useradd {OS_USER} failed: {created.stderr.strip()}") from None


_names = itertools.count(1)


class PgCluster:
    """One PostgreSQL cluster in its own temporary directory (``root``: the data directory
    ``root/data``, the socket, the server log ``root/server.log``)."""

    def __init__(self, programs: Path) -> None:
        self.programs = programs
        self.owner = ensure_os_user() if os.geteuid() == 0 else None
        self.root = Path(tempfile.mkdtemp(prefix=f"{TEMP_MARKER}{os.getpid()}-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = PORT
        self.root.chmod(0o700)
        if self.owner is not None:
            os.chown(self.root, self.owner.pw_uid, self.owner.pw_gid)
        self._run(
            "initdb", "--pgdata", str(self.data), "--username", SUPERUSER, "--auth", "trust",
            "--encoding", "UTF8", "--locale", "C", "--no-sync", "--no-instructions",
        )  # fmt: skip
        settings = {**SETTINGS, "unix_socket_directories": f"'{self.root}'", "port": str(PORT)}
        with (self.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write("\n# tests/support/pg_cluster.py\n")
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
        # The superuser is trusted on the socket; every other role needs its password.
        (self.data / "pg_hba.conf").write_text(
            f"local all {SUPERUSER} trust\nlocal all all scram-sha-256\n", encoding="utf-8"
        )

    # --- the server ---------------------------------------------------------------------

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self._run("pg_ctl", "--pgdata", str(self.data), "--log", str(self.log),
                  "--wait", "--timeout", str(int(TIMEOUT_S)), "start")  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """``fast``: roll back open transactions, disconnect every client, checkpoint;
        ``immediate``: PostgreSQL's own crash (no checkpoint, recovery at the next start)."""
        self._run("pg_ctl", "--pgdata", str(self.data), "--mode", mode,
                  "--wait", "--timeout", str(int(TIMEOUT_S)), "stop")  # fmt: skip

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    @property
    def running(self) -> bool:
        pid = self.postmaster_pid()
        return pid is not None and running(pid)

    def postmaster_pid(self) -> int | None:
        return postmaster_pid(self.data)

    def destroy(self) -> None:
        """Stop the server (if it runs) and remove the cluster's directory."""
        if self.running:
            try:
                self.stop("immediate")
            except ClusterError:
                if (pid := self.postmaster_pid()) is not None:
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # --- databases and roles ------------------------------------------------------------

    def url(self, dbname: str, user: str = SUPERUSER) -> str:
        """A libpq URL to ``dbname`` over the cluster's socket (no password in it)."""
        host = quote(str(self.root), safe="")
        return f"postgresql://{quote(user, safe='')}@/{quote(dbname, safe='')}?host={host}&port={self.port}"

    def connect(self, dbname: str = "postgres") -> psycopg.Connection[TupleRow]:
        """An autocommit connection as the superuser (the caller closes it)."""
        import psycopg  # here: without psycopg the fixtures skip, naming it

        return psycopg.connect(self.url(dbname), autocommit=True, connect_timeout=10)

    def create_database(self, name: str | None = None, owner: str = SUPERUSER) -> str:
        """A new, empty database (named ``t<pid>_<n>`` unless named); its name."""
        name = name or f"t{os.getpid()}_{next(_names)}"
        with self.connect() as conn:
            conn.execute(f'CREATE DATABASE "{name}" OWNER "{owner}"')
        return name

    def drop_database(self, name: str) -> None:
        with self.connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def create_role(self, name: str, password: str) -> None:
        """A login role that needs ``password`` on the socket (scram-sha-256)."""
        import psycopg.sql  # here: without psycopg the fixtures skip, naming it

        with self.connect() as conn:
            conn.execute(
                psycopg.sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    psycopg.sql.Identifier(name), psycopg.sql.Literal(password)
                )
            )

    # --- running its programs -----------------------------------------------------------

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.programs / program), *args]
        if self.owner is not None:
            command = ["runuser", "-u", self.owner.pw_name, "--", *command]
        # pg_ctl's server inherits stdout: a file, not a pipe this process would hold open.
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as out:
            done = subprocess.run(
                command, cwd=self.root, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, env=_server_env(), timeout=TIMEOUT_S, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                out.seek(0)
                raise ClusterError(
                    f"{program} {' '.join(args[-1:])} failed ({done.returncode}): "
                    f"{out.read().strip()}\n--- server log ---\n{self.log_tail()}"
                )


def _server_env() -> dict[str, str]:
    """The environment without the developer's PG* settings (they would redirect
    pg_ctl's own connection check), in a locale every system has."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    return {**env, "LC_ALL": "C", "LANG": "C"}


def postmaster_pid(data: Path) -> int | None:
    """The server's pid from its data directory's lock file (``None``: not running)."""
    try:
        first = (data / "postmaster.pid").read_text(encoding="utf-8").split("\n", 1)[0]
    except (FileNotFoundError, NotADirectoryError):
        return None
    return int(first) if first.strip().isdigit() else None


def sweep_stale(temp: Path | None = None) -> list[Path]:
    """Stop and remove the clusters of earlier runs that were killed (their pid is gone);
    the clusters of runs still alive are left alone."""
    swept: list[Path] = []
    for root in (temp or Path(tempfile.gettempdir())).glob(f"{TEMP_MARKER}*-*"):
        pid = root.name.removeprefix(TEMP_MARKER).split("-", 1)[0]
        if not pid.isdigit() or running(int(pid)):
            continue
        if (server := postmaster_pid(root / "data")) is not None and running(server):
            os.kill(server, signal.SIGQUIT)  # PostgreSQL's immediate shutdown
        shutil.rmtree(root, ignore_errors=True)
        swept.append(root)
    return swept


@dataclass(frozen=True)
class PgDatabase:
    cluster: PgCluster
    name: str

    @property
    def url(self) -> str:
        return self.cluster.url(self.name)

    def connect(self) -> psycopg.Connection[TupleRow]:
        return self.cluster.connect(self.name)


def started_cluster() -> PgCluster:
    """A new, running cluster; the test is skipped (naming what is missing) if none can be."""
    if (reason := unavailable()) is not None:
        pytest.skip(reason)
    programs = bin_dir()
    assert programs is not None
    sweep_stale()
    cluster = PgCluster(programs)
    try:
        cluster.start()
    except BaseException:
        cluster.destroy()
        raise
    return cluster


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """The session's cluster. A test that stops it restarts it before it ends."""
    cluster = started_cluster()
    try:
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def pg_database(pg_cluster: PgCluster) -> Iterator[PgDatabase]:
    """A fresh database of the session's cluster, dropped when the test ends."""
    if not pg_cluster.running:  # an earlier test stopped it and failed before restarting
        pg_cluster.start()
    database = PgDatabase(pg_cluster, pg_cluster.create_database())
    yield database
    if pg_cluster.running:
        pg_cluster.drop_database(database.name)


@pytest.fixture
def own_pg_cluster() -> Iterator[PgCluster]:
    """A cluster of the test's own (a second or two to make), for a test that stops,
    crashes or restarts it."""
    cluster = started_cluster()
    try:
        yield cluster
    finally:
        cluster.destroy()
