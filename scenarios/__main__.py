"""``python -m scenarios list | run NAME [--seed N] [--keep] | check HISTORY.jsonl``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scenarios.checker import check_history
from scenarios.history import History
from scenarios.library import load_all
from scenarios.play import ScenarioFailed, play
from scenarios.requirements import missing
from scenarios.seed import Seed, seed_from_env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scenarios", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="list the scenarios and what they need")
    run = commands.add_parser("run", help="run scenarios against real processes")
    run.add_argument("names", nargs="*", help="scenario names (default: all)")
    run.add_argument("--seed", type=int, help="default: RELAY_SCENARIO_SEED, else random")
    run.add_argument("--keep", action="store_true", help="keep run directories")
    check = commands.add_parser("check", help="run the history checks on a history.jsonl")
    check.add_argument("history", type=Path)
    args = parser.parse_args(argv)
    registry = load_all()
    if args.command == "list":
        for name, entry in sorted(registry.items()):
            tags = ("slow " if entry.slow else "") + " ".join(entry.needs)
            print(f"{name:42} {tags:24} {entry.doc.splitlines()[0]}")
        return 0
    if args.command == "check":
        report = check_history(History.load(args.history))
        print(report.describe())
        return 0 if report.ok else 1
    value = args.seed if args.seed is not None else seed_from_env()[0]
    print(f"seed {value}")
    failed = 0
    for name in args.names or sorted(registry):
        if name not in registry:
            print(f"unknown scenario {name!r}; see 'python -m scenarios list'", file=sys.stderr)
            return 2
        entry = registry[name]
        if (reason := missing(entry.needs)) is not None:
            print(f"SKIP {name}: {reason}")
            continue
        try:
            result = play(entry.build(Seed(value)), Seed(value), keep=args.keep)
        except ScenarioFailed as failure:
            failed += 1
            print(f"FAIL {failure}")
            continue
        seconds = sum(t for _, t in result.timings)
        print(f"PASS {name} ({seconds:.1f}s) {result.report.stats}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
