"""The fault mechanisms themselves, each shown to be real on a small child process:
libfaketime wall jumps and monotonic advances, tmpfs ENOSPC, libfiu EIO switched at run
time, SQLITE_FULL via max_page_count, and the SQLite-style countdown under strace."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from scenarios import launch
from scenarios.faults.clock import FakeClock
from scenarios.faults.clock import missing as faketime_missing
from scenarios.faults.countdown import Attempt, countdown_both, strace_attempt
from scenarios.faults.disk import (
    TmpfsMount,
    fiu_ctrl,
    fiu_missing,
    fiu_mod,
    inspect_store,
    integrity_check,
    limit_pages,
    strace_missing,
    tmpfs_missing,
)
from scenarios.procs import ManagedProcess
from scenarios.runner import mounts_under

pytestmark = pytest.mark.scenario

# A child that reports its clocks (and whether an fsync works) each time it reads a line.
PROBE = textwrap.dedent(
    """
    import asyncio, os, sys, time
    print("ready", flush=True)
    for line in sys.stdin:
        async def tick():  # an event loop must keep working under the fault
            await asyncio.sleep(0.001)
        asyncio.run(tick())
        try:
            fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o600)
            os.write(fd, b"x"); os.fsync(fd); os.close(fd); io = "ok"
        except OSError as exc:
            io = exc.strerror
        print(f"{time.time():.3f} {time.monotonic():.3f} {io}", flush=True)
    """
)


class Probe:
    def __init__(self, tmp_path: Path, mods: list[launch.LaunchMod]) -> None:
        argv, env = launch.apply(
            mods, [sys.executable, "-c", PROBE, str(tmp_path / "f")], {"PATH": "/usr/bin:/bin"}
        )
        self.proc = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        assert self.proc.stdout.readline().strip() == "ready"

    def read(self) -> tuple[float, float, str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        wall, mono, io = self.proc.stdout.readline().split(" ", 2)
        return float(wall), float(mono), io.strip()

    def close(self) -> None:
        self.proc.kill()
        self.proc.communicate(timeout=10)  # reaps and closes both pipes


def needs(reason: str | None) -> None:
    if reason is not None:
        pytest.skip(reason)


def test_wall_jumps_leave_monotonic_alone(tmp_path: Path) -> None:
    needs(faketime_missing())
    clock = FakeClock(tmp_path / "offset", "wall")
    probe = Probe(tmp_path, [clock.mod()])
    try:
        wall0, mono0, _ = probe.read()
        clock.jump_wall(-86_400 * 3)
        wall1, mono1, _ = probe.read()
        clock.jump_wall(+86_400 * 3 + 600)
        wall2, mono2, _ = probe.read()
    finally:
        probe.close()
    assert wall1 - wall0 == pytest.approx(-86_400 * 3, abs=5)
    assert wall2 - wall1 == pytest.approx(86_400 * 3 + 600, abs=5)
    assert 0 <= mono1 - mono0 < 5 and 0 <= mono2 - mono1 < 5


def test_monotonic_advance_moves_both_clocks_forward(tmp_path: Path) -> None:
    needs(faketime_missing())
    clock = FakeClock(tmp_path / "offset", "both")
    probe = Probe(tmp_path, [clock.mod()])
    try:
        _, mono0, _ = probe.read()
        clock.advance_monotonic(3600)
        _, mono1, _ = probe.read()
    finally:
        probe.close()
    assert mono1 - mono0 == pytest.approx(3600, abs=5)
    with pytest.raises(ValueError, match="only moves forward"):
        clock.advance_monotonic(-1)


def test_libfiu_eio_switched_at_run_time(tmp_path: Path) -> None:
    needs(fiu_missing())
    prefix = tmp_path / "fiu-ctrl"
    probe = Probe(tmp_path, [fiu_mod(prefix)])
    try:
        assert probe.read()[2] == "ok"
        fiu_ctrl(probe.proc.pid, "enable name=posix/io/sync/fsync,failinfo=5", prefix)
        assert probe.read()[2] == "Input/output error"
        fiu_ctrl(probe.proc.pid, "disable name=posix/io/sync/fsync", prefix)
        assert probe.read()[2] == "ok"
    finally:
        probe.close()


def test_faults_stack_in_one_process(tmp_path: Path) -> None:
    needs(faketime_missing() or fiu_missing())
    clock = FakeClock(tmp_path / "offset", "wall")
    prefix = tmp_path / "fiu-ctrl"
    probe = Probe(tmp_path, [clock.mod(), fiu_mod(prefix, ("enable name=posix/io/sync/fsync",))])
    try:
        wall0, _, io = probe.read()
        clock.jump_wall(7200)
        wall1, _, _ = probe.read()
    finally:
        probe.close()
    assert io != "ok"
    assert wall1 - wall0 == pytest.approx(7200, abs=5)


def test_tmpfs_gives_real_enospc_and_is_unmounted(tmp_path: Path) -> None:
    needs(tmpfs_missing())
    root = Path(os.path.realpath("/tmp")) / f"relay-scenario-test-{tmp_path.name}"
    mount = TmpfsMount(root / "data", 256 * 1024)
    try:
        mount.mount()
        db = sqlite3.connect(root / "data" / "cache.sqlite")
        db.execute("create table t(x blob)")
        with pytest.raises(sqlite3.OperationalError, match="full"), db:
            for _ in range(100):
                db.execute("insert into t values (randomblob(8192))")
        db.close()
        assert integrity_check(root / "data" / "cache.sqlite") == "ok"
        mount.release()
    finally:
        mount.unmount()
        shutil.rmtree(root, ignore_errors=True)
    assert mounts_under(root) == []


def test_sqlite_full_from_max_page_count(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "c.sqlite")
    db.execute("create table t(x blob)")
    limit_pages(db, extra_pages=2)
    with pytest.raises(sqlite3.OperationalError, match="full"), db:
        for _ in range(50):
            db.execute("insert into t values (randomblob(4000))")
    db.close()
    assert integrity_check(tmp_path / "c.sqlite") == "ok"


WRITER = textwrap.dedent(
    """
    import sqlite3, sys
    db = sqlite3.connect(sys.argv[1])
    db.execute("pragma journal_mode=wal"); db.execute("pragma synchronous=full")
    with db:
        for i in range(20):
            db.execute("insert into t values (?, randomblob(3000))", (i,))
    """
)


@pytest.mark.slow
def test_countdown_every_io_of_a_sqlite_transaction(tmp_path: Path) -> None:
    """Fail write/fdatasync number N, N = 1, 2, ... (one-off, then persistent): after every
    attempt the database passes integrity_check and holds all or none of the rows."""
    needs(strace_missing())
    pristine, db = tmp_path / "pristine.sqlite", tmp_path / "db.sqlite"
    seed_db = sqlite3.connect(pristine)
    seed_db.execute("pragma journal_mode=wal")
    seed_db.execute("create table t(i, b)")
    seed_db.executemany("insert into t values (?, 'x')", [(-i,) for i in range(1, 11)])
    seed_db.commit()
    seed_db.close()

    def prepare() -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        shutil.copy(pristine, db)

    def check(attempt: Attempt) -> list[str]:
        problems = []
        if (verdict := integrity_check(db)) != "ok":
            problems.append(f"integrity_check: {verdict}")
        rows = sqlite3.connect(db).execute("select count(*) from t").fetchone()[0]
        if rows not in (10, 30) or (attempt.succeeded and rows != 30):
            problems.append(f"{rows} rows: the transaction was not all-or-nothing")
        return problems

    attempt = strace_attempt(
        [sys.executable, "-c", WRITER, str(db)],
        ("pwrite64", "fdatasync"),
        tmp_path,
        prepare=prepare,
    )
    one_off, persistent = countdown_both(attempt, check, limit=200)
    for report in (one_off, persistent):
        assert report.completed, report.describe()
        assert report.problems == [], report.problems
        assert any(not a.succeeded for a in report.attempts), "no fault ever made it fail"
        assert len(report.attempts) > 5, report.describe()


def test_managed_process_reports_startup_failure(tmp_path: Path) -> None:
    proc = ManagedProcess(
        "dud",
        [sys.executable, "-c", "import sys; sys.exit('no banner')"],
        {"PATH": "/usr/bin"},
        log_dir=tmp_path,
        label="dud",
    )
    with pytest.raises(RuntimeError, match="exited with 1 before it was ready"):
        proc.start("^never$", timeout=5)


# A writer that owns its database as the relay does (EXCLUSIVE before WAL: the WAL index
# lives in its memory, no -shm), commits, reports, and waits to be killed.
OWNER = textwrap.dedent(
    """
    import sqlite3, sys
    db = sqlite3.connect(sys.argv[1], isolation_level=None)
    db.execute("pragma locking_mode=exclusive"); db.execute("pragma journal_mode=wal")
    db.execute("pragma synchronous=full")
    db.execute("create table if not exists intents(id)")
    for i in range(50):
        db.execute("begin immediate"); db.execute("insert into intents values (?)", (i,))
        db.execute("commit")
    print("committed", flush=True)
    sys.stdin.read()
    """
)


def test_store_inspection_after_a_kill_leaves_the_directory_as_it_was(tmp_path: Path) -> None:
    """StoreIntegrity's mechanism: while the owner runs, the file is locked; after a
    kill -9 a read-only connection sees every commit (replaying the WAL) and leaves no
    -shm behind; a damaged file is reported, not 'ok'."""
    db = tmp_path / "cache.sqlite"
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "committed"
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            inspect_store(db)
    finally:
        owner.kill()
        owner.communicate(timeout=10)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert "cache.sqlite-wal" in before and "cache.sqlite-shm" not in before
    report = inspect_store(db)
    assert (report.integrity, report.rows) == ("ok", {"intents": 50})
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    writer = sqlite3.connect(db)  # checkpoint every page into the main file, then damage one
    writer.execute("pragma wal_checkpoint(truncate)")
    writer.execute("pragma journal_mode=delete")
    writer.close()
    with db.open("r+b") as raw:
        raw.seek(4096)  # page 2: the table's b-tree page
        raw.write(b"\x42" * 16)
    assert inspect_store(db, count=()).integrity != "ok"
