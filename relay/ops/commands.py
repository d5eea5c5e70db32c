"""``relay admin status|metrics|snapshot`` and ``relay status``: clients of the running
relay's admin socket: ``--socket``, else ``RELAY_ADMIN_SOCKET``, else
``<data dir>/run/admin.sock`` (``--data-dir``/``RELAY_DATA_DIR``, default ./data), so they
find a relay started with the same settings without any variable."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from relay.errors import ConfigError
from relay.ops.admin_client import (
    SNAPSHOT_TIMEOUT_S,
    TIMEOUT_S,
    AdminUnavailable,
    printable,
    request,
    scrub,
)
from relay.ops.status_view import render
from relay.settings.config import admin_socket_of, data_dir_of
from relay.settings.env_file import add_env_file_option, layered


def register(commands: Any) -> None:
    """Add the commands to ``relay``'s subparsers (each sets ``run``)."""
    admin = commands.add_parser("admin", help="query the running relay over its admin socket")
    admin.add_argument("action", choices=("status", "metrics", "snapshot"))
    _socket_options(admin)
    admin.set_defaults(run=run_admin)
    status = commands.add_parser("status", help="a summary of the running relay")
    status.add_argument("--json", action="store_true", help="the full status as JSON")
    _socket_options(status)
    status.set_defaults(run=run_status)


def _socket_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--socket",
        type=Path,
        help="the admin socket (default: RELAY_ADMIN_SOCKET, else <data dir>/run/admin.sock)",
    )
    parser.add_argument(
        "--data-dir", help="the relay's data directory (default: RELAY_DATA_DIR, else ./data)"
    )
    add_env_file_option(parser)
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help=f"how long to wait for the relay (default {TIMEOUT_S:g} s; a snapshot's "
        f"progress lines: {SNAPSHOT_TIMEOUT_S:g} s)",
    )


def _socket(args: argparse.Namespace, prog: str) -> Path | None:
    """``--socket``; else what ``relay serve`` would use with the same settings (flags,
    environment, env file): RELAY_ADMIN_SOCKET, or the default in the data directory."""
    if args.socket is not None:
        return Path(args.socket).absolute()
    try:
        settings = layered(os.environ, env_file=args.env_file, flags={"data_dir": args.data_dir})
    except ConfigError as exc:
        print(f"{prog}: configuration error: {exc}", file=sys.stderr)
        return None
    path = admin_socket_of(settings.env, data_dir_of(settings.env))
    if path is None:
        print(
            f"{prog}: the admin socket is off (RELAY_ADMIN_SOCKET=off): start the relay "
            "without it, or pass --socket",
            file=sys.stderr,
        )
    return path


def _ask(
    path: Path,
    prog: str,
    command: str,
    timeout: float | None,
    *,
    keep_newlines: bool = False,
    **kwargs: Any,
) -> dict[str, Any] | None:
    """The relay's answer with every string made printable (``keep_newlines``: for the
    metrics text); ``None`` after one line on stderr."""
    default = SNAPSHOT_TIMEOUT_S if command == "snapshot" else TIMEOUT_S
    try:
        raw = request(path, command, timeout_s=timeout or default, **kwargs)
    except AdminUnavailable as exc:
        print(f"{prog}: {printable(str(exc))}", file=sys.stderr)
        return None
    answer: dict[str, Any] = scrub(raw, keep_newlines=keep_newlines)
    if answer.get("ok") is not True:
        error = answer.get("error")
        error = error if isinstance(error, dict) else {}
        print(f"{prog}: {error.get('code')}: {error.get('message')}", file=sys.stderr)
        return None
    return answer


def _unexpected(prog: str, path: Path) -> int:
    print(f"{prog}: the answer on {path} lacks what the relay sends (a different version?)",
          file=sys.stderr)  # fmt: skip
    return 1


def run_admin(args: argparse.Namespace) -> int:
    prog = f"relay admin {args.action}"
    path = _socket(args, prog)
    if path is None:
        return 1
    if args.action == "snapshot":

        def progress(raw: dict[str, Any]) -> None:
            p = scrub(raw)
            print(f"copied {p.get('copiedPages')}/{p.get('totalPages')} pages", file=sys.stderr)

        answer = _ask(path, prog, "snapshot", args.timeout, on_progress=progress)
        if answer is None:
            return 1
        try:
            snap = answer["snapshot"]
            print(f"snapshot written: {snap['path']} ({snap['bytes']} bytes, {snap['seconds']} s)")
        except (KeyError, TypeError):
            return _unexpected(prog, path)
        return 0
    metrics = args.action == "metrics"
    answer = _ask(path, prog, args.action, args.timeout, keep_newlines=metrics)
    if answer is None:
        return 1
    if metrics:
        if not isinstance(answer.get("text"), str):
            return _unexpected(prog, path)
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
    answer = _ask(path, "relay status", "status", args.timeout)
    if answer is None:
        return 1
    if args.json:
        print(json.dumps(answer, indent=2, sort_keys=True))
        return 0
    try:
        table = render(answer, colour=wants_colour(sys.stdout))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError):
        return _unexpected("relay status", path)
    print(table)
    return 0
