"""``relay cache backup|restore|verify``: offline commands on a stopped relay's store
(relay.storage.backup, relay.storage.verify; docs/replay-cache.md, *Backup, restore and verify*).

Each reads ``REASONING_CACHE_PATH`` (or its default) unless given a path. Progress and
refusals go to stderr, one line each; the verify report goes to stdout. Exit codes: 0
done (verify: clean), 1 refused or failed (verify: damage found), 2 usage, 3 (verify)
the file is no relay cache at all (empty, not SQLite, an empty or foreign database).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from relay.clock import SystemClock
from relay.errors import ConfigError, NotACache, SnapshotRefused, StoreError
from relay.ops.progress import ProgressReport
from relay.settings.config import load_config
from relay.settings.database_url import DatabaseUrl
from relay.storage.backup import (
    SnapshotKind,
    SnapshotResult,
    make_snapshot,
    replace_with_snapshot,
)
from relay.storage.disk_guard import blocked_path, guard_path
from relay.storage.verify import Progress, VerifyReport, verify_store

USAGE = 2
NOT_A_CACHE = 3


def register(commands: Any) -> None:
    """Add ``relay cache ...`` to ``relay``'s subparsers (each action sets ``run``)."""
    cache = commands.add_parser(
        "cache", help="back up, restore or verify the reasoning cache of a stopped relay"
    )
    actions = cache.add_subparsers(dest="cache_command", required=True)
    backup = actions.add_parser("backup", help="copy the store into a new snapshot file")
    backup.add_argument("dest", type=Path, help="the new file (must not exist)")
    backup.add_argument(
        "--source", type=Path, help="the store to copy (default: REASONING_CACHE_PATH)"
    )
    backup.set_defaults(run=run_backup)
    restore = actions.add_parser("restore", help="make a new live store from a backup file")
    restore.add_argument("src", type=Path, help="the backup file")
    restore.add_argument(
        "dest", type=Path, nargs="?",
        help="the new store (must not exist unless --replace; default: REASONING_CACHE_PATH)",
    )  # fmt: skip
    restore.add_argument(
        "--replace",
        action="store_true",
        help="restore in place: move the stopped store at DEST aside (kept, its new name "
        "printed) and put the restored copy there",
    )
    restore.set_defaults(run=run_restore)
    verify = actions.add_parser("verify", help="check a store's integrity and every record")
    verify.add_argument("path", type=Path, nargs="?", help="default: REASONING_CACHE_PATH")
    verify.add_argument("--json", action="store_true", help="the report as JSON")
    verify.set_defaults(run=run_verify)


def _shared_store(prog: str, given: Path | None) -> DatabaseUrl | None:
    """The shared store REASONING_CACHE_URL names, unless a file was given."""
    if given is not None:
        return None
    try:
        return load_config().reasoning_cache_url
    except ConfigError:
        return None  # _configured_path reports it


def _refuse_shared(prog: str, url: DatabaseUrl) -> int:
    """Backups of the shared store are PostgreSQL's tools' job (a consistent snapshot of
    a database other relays write to)."""
    print(
        f"{prog}: the reasoning cache is the PostgreSQL database {url} (REASONING_CACHE_URL); "
        "back it up with pg_dump --format=custom and restore it with pg_restore into a new, "
        "empty database: relays opening a restored copy give it a fresh secret, advance "
        "every generation and poison its open intents by themselves",
        file=sys.stderr,
    )
    return 1


def _configured_path(prog: str) -> Path | None:
    try:
        return load_config().cache_path
    except ConfigError as exc:
        print(f"{prog}: configuration error: {exc}", file=sys.stderr)
        return None


def run_backup(args: argparse.Namespace) -> int:
    if (url := _shared_store("relay cache backup", args.source)) is not None:
        return _refuse_shared("relay cache backup", url)
    source = args.source or _configured_path("relay cache backup")
    if source is None:
        return USAGE
    return _snapshot("relay cache backup", source, args.dest, SnapshotKind.BACKUP)


def run_restore(args: argparse.Namespace) -> int:
    if (url := _shared_store("relay cache restore", args.dest)) is not None:
        return _refuse_shared("relay cache restore", url)
    dest = args.dest or _configured_path("relay cache restore")
    if dest is None:
        return USAGE
    if args.replace:
        return _replace("relay cache restore", args.src, dest)
    return _snapshot("relay cache restore", args.src, dest, SnapshotKind.RESTORE)


def _snapshot(prog: str, source: Path, dest: Path, kind: SnapshotKind) -> int:
    if not source.is_file():
        print(f"{prog}: there is no reasoning cache at {source}", file=sys.stderr)
        return USAGE
    report = ProgressReport(sys.stderr, f"{prog}: copying", "pages")
    try:
        result = make_snapshot(source, dest, kind=kind, clock=SystemClock(), progress=report.update)
    except (StoreError, SnapshotRefused, OSError) as exc:
        return _failed(prog, report, exc, dest)
    report.done()
    print(_written(kind, result))
    return 0


def _replace(prog: str, source: Path, live: Path) -> int:
    if not source.is_file():
        print(f"{prog}: there is no reasoning cache at {source}", file=sys.stderr)
        return USAGE
    report = ProgressReport(sys.stderr, f"{prog}: copying", "pages")
    try:
        replaced = replace_with_snapshot(source, live, clock=SystemClock(), progress=report.update)
    except (StoreError, SnapshotRefused, OSError) as exc:
        return _failed(prog, report, exc, live)
    report.done()
    if replaced.snapshot is None:
        print(f"restore finished: {replaced.live} (published by the earlier, interrupted run)")
    else:
        print(_written(SnapshotKind.RESTORE, replaced.snapshot))
    if replaced.kept is not None:
        print(
            f"the store it replaced is kept as {replaced.kept} (with its -wal, .guard and "
            ".reserve files, if it had them); nothing was deleted: delete them once you no "
            "longer need them"
        )
    return 0


def _failed(prog: str, report: ProgressReport, exc: Exception, path: Path) -> int:
    report.done()
    if isinstance(exc, OSError) and not isinstance(exc, StoreError):
        print(f"{prog}: {exc.filename or path}: {exc.strerror or exc}", file=sys.stderr)
    else:
        print(f"{prog}: {exc}", file=sys.stderr)
    return 1


def _written(kind: SnapshotKind, result: SnapshotResult) -> str:
    extra = f"; {result.recovered_intents} open intents poisoned" * bool(result.recovered_intents)
    return (
        f"{kind.value} written: {result.path} ({result.bytes} bytes, {result.pages} pages{extra}); "
        "it has a new cache secret, and a relay opening it quarantines every earlier generation"
    )


def run_verify(args: argparse.Namespace) -> int:
    prog = "relay cache verify"
    if (url := _shared_store(prog, args.path)) is not None:
        # Imported here: only a shared store's verify needs psycopg (design §22).
        from relay.storage.postgres.verify import verify_shared  # noqa: PLC0415

        return _verify(prog, lambda progress: verify_shared(url, progress=progress), args.json)
    path = args.path or _configured_path(prog)
    if path is None:
        return USAGE
    if not path.is_file():
        print(f"{prog}: there is no reasoning cache at {path}", file=sys.stderr)
        return USAGE
    siblings = (
        (guard_path(path), "the cache latched (docs/replay-cache.md, Disk pressure)"),
        (blocked_path(path), "a backup or restore into it did not finish"),
    )
    for sibling, meaning in siblings:
        if sibling.exists():
            print(f"{prog}: note: {sibling} exists: {meaning}", file=sys.stderr)
    return _verify(prog, lambda progress: verify_store(path, progress=progress), args.json)


def _verify(prog: str, run: Callable[[Progress], VerifyReport], json_report: bool) -> int:
    """Run a verification with progress on stderr; print its report; the exit code."""
    report = ProgressReport(sys.stderr, f"{prog}: checking", "records")
    try:
        verified = run(lambda _phase, done, total: report.update(done, total))
    except StoreError as exc:
        report.done()
        print(f"{prog}: {exc}", file=sys.stderr)
        return NOT_A_CACHE if isinstance(exc, NotACache) else 1
    report.done()
    if json_report:
        print(json.dumps(verified.to_json(), indent=2, sort_keys=True))
    else:
        print(render(verified))
    return 1 if verified.damaged else 0


def render(report: VerifyReport) -> str:
    """The text report: counts by code, a few observation ids for damage."""
    tally = report.tally
    lines = [
        f"verified {report.path} (schema {report.schema_version}): "
        f"{tally.records} records, {tally.payloads} payloads"
    ]
    damage, notes = tally.damage, tally.notes
    lines.append("damage:" if damage else "damage: none")
    for code, count in damage.items():
        ids = tally.examples.get(code)
        where = f" (observations {', '.join(map(str, ids))})" if ids else ""
        lines.append(f"  {code} {count}{where}")
    lines.append("notes:" if notes else "notes: none")
    lines += [f"  {code} {count}" for code, count in notes.items()]
    lines.append(f"result: {'damaged' if damage else 'clean'}")
    return "\n".join(lines)
