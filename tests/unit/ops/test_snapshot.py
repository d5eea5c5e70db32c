"""Inspection snapshots (relay.ops.snapshot) of a real store, on a real event loop."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest

from relay.clock import ManualClock
from relay.core.records import EMPTY_PLAN
from relay.core.scope import ScopeTargeting
from relay.errors import SnapshotRefused
from relay.ops import snapshot
from relay.ops.snapshot import PAGES_PER_STEP, Progress, Snapshotter
from relay.storage.replay_store import ReasoningStore
from tests.support.tmpfs import size_limited_tmpfs

TARGET = ScopeTargeting(credential="c" * 64, model="gpt-5", caller=None)


def h(n: int) -> str:
    return f"{n:064x}"


@pytest.fixture
def store(store: ReasoningStore) -> ReasoningStore:
    """The shared fresh store (tests/unit/conftest.py), with 300 records in it."""
    fill(store, 300)
    return store


def fill(store: ReasoningStore, n: int, *, start: int = 0) -> None:
    """``n`` observations with 8 KB payloads: some 600 pages, about 20 copy steps."""
    with store.transaction():
        sid = store.scope_for(h(999), TARGET).id
        for i in range(start, start + n):
            obs = store.add_observation(
                scope_id=sid, generation=1, position=1, start_digest=h(0), end_digest=h(i + 1),
                envelope_fingerprint=h(5), payload_fingerprint=h(i + 1), output_hash=h(7),
                prior_plan=EMPTY_PLAN, intent_id=None, snapshot=None, replayable=True,
                now=1000.0 + i,
            )  # fmt: skip
            store.put_payload(obs.id, f"{i:08d}" * 1000, 1000.0 + i)


def rows(conn: sqlite3.Connection, table: str) -> list[tuple[object, ...]]:
    return conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()


def open_copy(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def test_a_snapshot_is_complete_private_and_without_the_secret(
    store: ReasoningStore, tmp_path: Path
) -> None:
    snaps = tmp_path / "inspection"
    snapper = Snapshotter(store, snaps, ManualClock())
    seen: list[tuple[int, int]] = []

    async def run() -> Path:
        task = snapper.start(lambda p: seen.append((p.copied_pages, p.total_pages)))
        return (await task).path

    path = asyncio.run(run())
    assert stat.S_IMODE(snaps.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o400
    assert os.listdir(snaps) == [path.name]  # no temporary file left
    assert path.name == "reasoning-cache-20260101T000000Z.sqlite"
    total = seen[-1][1]
    assert seen[-1] == (total, total) and len(seen) == -(-total // PAGES_PER_STEP)
    assert [copied for copied, _ in seen] == sorted(copied for copied, _ in seen)
    assert store.secret not in path.read_bytes()
    copy = open_copy(path)
    try:
        assert copy.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert copy.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # one file
        meta = dict(copy.execute("SELECT key, value FROM meta").fetchall())
        assert "secret" not in meta and meta["coverage-gap"] == 1 and "inspection-copy" in meta
        source = store._conn
        assert source is not None
        for table in ("scopes", "observations", "payloads", "markers", "intents"):
            assert rows(copy, table) == rows(source, table)
    finally:
        copy.close()
    assert snapper.last is not None and snapper.last.path == path and not snapper.running


def test_requests_run_between_steps_and_their_writes_reach_the_copy(
    store: ReasoningStore, tmp_path: Path
) -> None:
    snapper = Snapshotter(store, tmp_path / "inspection", ManualClock())
    ticks: list[int] = []
    first_step = asyncio.Event()

    def listener(progress: Progress) -> None:
        if progress.copied_pages == PAGES_PER_STEP:
            first_step.set()

    async def other_work(task: asyncio.Task[Any]) -> None:
        """What the loop does meanwhile: ticks, and one write after the first step."""
        await first_step.wait()
        fill(store, 50, start=300)  # on the loop thread, between two steps
        while not task.done():
            ticks.append(1)
            await asyncio.sleep(0)

    async def run() -> Path:
        task = snapper.start(listener)
        await asyncio.gather(task, other_work(task))
        return task.result().path

    path = asyncio.run(run())
    assert len(ticks) >= 10  # the loop ran between the copy's ~20 steps
    copy = open_copy(path)
    try:
        assert copy.execute("SELECT count(*) FROM payloads").fetchone()[0] == 350
        assert copy.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        copy.close()


def test_one_copy_at_a_time_and_earlier_ones_are_kept(
    store: ReasoningStore, tmp_path: Path
) -> None:
    snapper = Snapshotter(store, tmp_path / "inspection", ManualClock())

    async def run() -> tuple[Path, Path]:
        first = snapper.start()
        with pytest.raises(SnapshotRefused) as refused:
            snapper.start()  # the same loop turn: it has not even taken a step yet
        assert refused.value.code == "snapshot_in_progress"
        one = (await first).path
        two = (await snapper.start()).path  # same second on the fake clock: a new name
        return one, two

    one, two = asyncio.run(run())
    assert one != two and one.exists() and two.exists()
    assert two.name == "reasoning-cache-20260101T000000Z-2.sqlite"


def test_shutdown_waits_for_a_running_copy(store: ReasoningStore, tmp_path: Path) -> None:
    snapper = Snapshotter(store, tmp_path / "inspection", ManualClock())

    async def run() -> bool:
        task = snapper.start()
        await snapper.wait_idle()
        return task.done() and task.exception() is None

    assert asyncio.run(run())
    assert snapper.last is not None and snapper.last.path.exists()


def test_refusals(store: ReasoningStore, tmp_path: Path) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o755)
    open_dir.chmod(0o755)

    async def code(snapper: Snapshotter) -> str:
        with pytest.raises(SnapshotRefused) as refused:
            snapper.start()
        return refused.value.code

    assert asyncio.run(code(Snapshotter(None, tmp_path / "x", ManualClock()))) == "no_store"
    assert asyncio.run(code(Snapshotter(store, open_dir, ManualClock()))) == (
        "directory_not_private"
    )
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    assert asyncio.run(code(Snapshotter(store, link, ManualClock()))) == "directory_not_private"
    assert os.listdir(open_dir) == []


def test_no_copy_without_the_free_space_margin(store: ReasoningStore) -> None:
    """A real 16 MiB tmpfs: the store fits, the 64 MiB margin does not."""
    with size_limited_tmpfs(16 << 20) as volume:
        small = volume.target
        snapper = Snapshotter(store, small, ManualClock())

        async def run() -> str:
            with pytest.raises(SnapshotRefused) as refused:
                snapper.start()
            return str(refused.value)

        message = asyncio.run(run())
        assert "64" in message or str(64 * 1024 * 1024) in message
        assert os.listdir(small) == []


def test_no_copy_of_a_store_over_the_ceiling(
    store: ReasoningStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ceiling is checked against the store's real page count (lowered here: a
    256 MiB store is too slow to build in a unit test)."""
    monkeypatch.setattr(snapshot, "SOURCE_CEILING_BYTES", store.source_bytes() - 1)
    snapper = Snapshotter(store, tmp_path / "inspection", ManualClock())

    async def run() -> str:
        with pytest.raises(SnapshotRefused) as refused:
            snapper.start()
        return refused.value.code

    assert asyncio.run(run()) == "source_too_large"
    assert not (tmp_path / "inspection").exists()  # refused before anything was made
    monkeypatch.setattr(snapshot, "SOURCE_CEILING_BYTES", store.source_bytes())
    assert asyncio.run(_snapshot(snapper)).exists()  # exactly at the ceiling: copied


async def _snapshot(snapper: Snapshotter) -> Path:
    return (await snapper.start()).path
