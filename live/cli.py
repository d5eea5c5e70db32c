"""``python -m live``: the acceptance run (``nox -s live``; ``-- --offline`` for the fake).

Exit status: 0 when every check passed or was skipped (also when no key is set: the run
is then skipped as a whole), 1 when a check failed or the budget stopped the run, 2 for a
usage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from live.runner import load_recorder, run, select_checks
from live.settings import (
    DEFAULT_ALT_MODEL,
    DEFAULT_BASE_URL,
    DEFAULT_MAX_REQUESTS,
    DEFAULT_MAX_TOKENS,
    DEFAULT_MODEL,
    DEFAULT_RESULTS,
    Settings,
    live_strict_provider,
)

SKIPPED = (
    "live acceptance skipped: OPENAI_API_KEY is not set "
    "(`nox -s live -- --offline` runs the same checks against the fake upstream)"
)


def parse_args(argv: Sequence[str] | None, environ: Mapping[str, str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m live",
        description="Acceptance checks through a real relay subprocess: against the OpenAI "
        "API (OPENAI_API_KEY, RELAY_LIVE_MODEL) or, with --offline, the fake upstream.",
    )
    parser.add_argument("--offline", action="store_true", help="run against the fake upstream")
    parser.add_argument(
        "--model", default=environ.get("RELAY_LIVE_MODEL") or DEFAULT_MODEL,
        help=f"reasoning model to test (RELAY_LIVE_MODEL, default {DEFAULT_MODEL})",
    )  # fmt: skip
    parser.add_argument(
        "--alt-model", default=environ.get("RELAY_LIVE_ALT_MODEL") or DEFAULT_ALT_MODEL,
        help=f"another model for the isolation check (default {DEFAULT_ALT_MODEL})",
    )  # fmt: skip
    parser.add_argument("--max-requests", type=_positive, default=DEFAULT_MAX_REQUESTS,
                        help=f"stop before request N+1 (default {DEFAULT_MAX_REQUESTS})")  # fmt: skip
    parser.add_argument("--max-tokens", type=_positive, default=DEFAULT_MAX_TOKENS,
                        help=f"stop once this many tokens are used (default {DEFAULT_MAX_TOKENS})")  # fmt: skip
    parser.add_argument("--record", type=Path, metavar="DIR",
                        help="record relay-upstream exchanges as vcrpy cassettes in DIR")  # fmt: skip
    parser.add_argument("--shareable", action="store_true",
                        help="with --record: cassettes fit to share (the recorder scrubs them)")  # fmt: skip
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS, metavar="DIR",
                        help=f"where the JSON summary and logs go (default {DEFAULT_RESULTS}/)")  # fmt: skip
    parser.add_argument("--only", action="append", default=[], metavar="NAME[,NAME]",
                        help="run only these checks (repeatable)")  # fmt: skip
    parser.add_argument("--seed", type=int, help="seed for the image checks' shuffles")
    parser.add_argument("--list", action="store_true", help="list the checks and exit")
    return parser.parse_args(argv)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    args = parse_args(argv, environ)
    only = tuple(name for item in args.only for name in item.split(",") if name)
    try:
        checks = select_checks(only)
    except ValueError as error:
        print(f"python -m live: {error}", file=sys.stderr)
        return 2
    if args.list:
        for check in checks:
            print(f"{check.name:28} {check.title}")
        return 0
    api_key = environ.get("OPENAI_API_KEY", "")
    if not args.offline and not api_key:
        print(SKIPPED)
        return 0
    if args.record is not None:
        try:
            load_recorder()
        except ImportError as error:
            print(f"python -m live: --record needs live/cassettes.py: {error}", file=sys.stderr)
            return 2
    settings = Settings(
        offline=args.offline,
        model=args.model,
        alt_model=args.alt_model,
        max_requests=args.max_requests,
        max_tokens=args.max_tokens,
        results_dir=args.results,
        record_dir=args.record,
        shareable=args.shareable,
        only=only,
    )
    if args.seed is not None:
        settings = dataclasses.replace(settings, seed=args.seed)
    if not args.offline:
        settings = dataclasses.replace(
            settings,
            api_key=api_key,
            base_url=environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL,
            strict=live_strict_provider(environ),
        )
    report = run(settings)
    return 0 if report.ok else 1
