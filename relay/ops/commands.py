"""``relay admin status|metrics|snapshot`` and ``relay status``: clients of the running
relay's admin socket (``RELAY_ADMIN_SOCKET``, or ``--socket``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from relay.config import load_config
from relay.errors import ConfigError
from relay.ops.admin_client import AdminUnavailable, request
from relay.ops.status_view import render


def register(commands: Any) -> None:
    """Add the commands to ``relay``'s subparsers (each sets ``run``)."""
    admin = commands.add_parser("admin", help="query the running relay over its admin socket")
    admin.add_argument("action", choices=("status", "metrics", "snapshot"))
    _socket_option(admin)
    admin.set_defaults(run=run_admin)
    status = commands.add_parser("status", help="a summary of the running relay")
    status.add_argument("--json", action="store_true", help="the full status as JSON")
    _socket_option(status)
    status.set_defaults(run=run_status)


def _socket_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--socket", type=Path, help="the admin socket (default: RELAY_ADMIN_SOCKET)"
    )


def _socket(args: argparse.Namespace, prog: str) -> Path | None:
    if args.socket is not None:
        return Path(args.socket)
    try:
        path = load_config().admin_socket
    except ConfigError as exc:
        print(f"{prog}: configuration error: {exc}", file=sys.stderr)
        return None
    if path is None:
        print(
            f"{prog}: the admin socket is not enabled: start the relay with "
            "RELAY_ADMIN_SOCKET=/path/to/admin.sock and set it here too (or pass --socket)",
            file=sys.stderr,
        )
    return path


def _ask(path: Path, prog: str, command: str, **kwargs: Any) -> dict[str, Any] | None:
    try:
        answer = request(path, command, **kwargs)
    except AdminUnavailable as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return None
    if not answer.get("ok"):
        error = answer.get("error") or {}
        print(f"{prog}: {error.get('code')}: {error.get('message')}", file=sys.stderr)
        return None
    return answer


def run_admin(args: argparse.Namespace) -> int:
    prog = f"relay admin {args.action}"
    path = _socket(args, prog)
    if path is None:
        return 1
    if args.action == "snapshot":

        def progress(p: dict[str, Any]) -> None:
            print(f"copied {p['copiedPages']}/{p['totalPages']} pages", file=sys.stderr)

        answer = _ask(path, prog, "snapshot", on_progress=progress)
        if answer is None:
            return 1
        snap = answer["snapshot"]
        print(f"snapshot written: {snap['path']} ({snap['bytes']} bytes, {snap['seconds']} s)")
        return 0
    answer = _ask(path, prog, args.action)
    if answer is None:
        return 1
    if args.action == "metrics":
        sys.stdout.write(answer["text"])
    else:
        print(json.dumps(answer, indent=2, sort_keys=True))
    return 0


def wants_colour(stream: TextIO) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ


def run_status(args: argparse.Namespace) -> int:
    path = _socket(args, "relay status")
    if path is None:
        return 1
    answer = _ask(path, "relay status", "status")
    if answer is None:
        return 1
    if args.json:
        print(json.dumps(answer, indent=2, sort_keys=True))
    else:
        print(render(answer, colour=wants_colour(sys.stdout)))
    return 0
