"""``relay`` command line: ``relay serve``, the admin socket's clients (relay.ops.commands)
and the offline cache commands (relay.ops.cache_commands)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

from relay import __version__
from relay.app import heap
from relay.app.event_loop import loop_factory
from relay.app.offline import load_offline_upstream
from relay.app.server import RelayServer, serve_forever
from relay.errors import ConfigError, ListenError, StoreError
from relay.observability import log
from relay.ops import cache_commands
from relay.ops import commands as ops_commands
from relay.settings.config import load_config
from relay.settings.env_file import FLAG_VARIABLES, add_env_file_option, layered


def _serve(args: argparse.Namespace) -> int:
    try:
        settings = layered(
            os.environ,
            env_file=args.env_file,
            flags={dest: getattr(args, dest) for dest in FLAG_VARIABLES},
        )
    except ConfigError as exc:
        print(f"relay: configuration error: {exc}", file=sys.stderr)
        return 2
    try:
        config = load_config(settings.env)
    except ConfigError as exc:
        print(f"relay: configuration error: {settings.explain(exc)}", file=sys.stderr)
        return 2
    log.configure(config.log_level, config.log_format)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        # The composition root: without a key, the installed offline upstream answers.
        offline = load_offline_upstream() if config.uses_embedded_fake else None
        await serve_forever(RelayServer(config, offline=offline), stop, settled=heap.settle)

    try:
        with asyncio.Runner(loop_factory=loop_factory(config.event_loop)) as runner:
            runner.run(run())
    except ConfigError as exc:
        print(f"relay: configuration error: {settings.explain(exc)}", file=sys.stderr)
        return 2
    except StoreError as exc:
        print(f"relay: cannot open the reasoning cache: {exc}", file=sys.stderr)
        return 1
    except ListenError as exc:
        print(f"relay: cannot start: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"relay: cannot start: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="relay",
        description="Chat Completions relay for the OpenAI Responses API with encrypted "
        "reasoning replay. Configuration comes from the environment (see README); relay "
        "serve also takes --data-dir/--host/--port and --env-file.",
    )
    parser.add_argument("--version", action="version", version=f"relay {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="run the relay HTTP server",
        description="Settings come from the flags, then the environment, then --env-file "
        "(a flag wins over the environment, which wins over the file).",
    )
    serve.add_argument("--data-dir", help="where the token and the cache live (RELAY_DATA_DIR)")
    serve.add_argument("--host", help="the address to listen on (RELAY_HOST)")
    serve.add_argument("--port", help="the port to listen on (RELAY_PORT)")
    add_env_file_option(serve)
    ops_commands.register(commands)  # relay admin ..., relay status
    cache_commands.register(commands)  # relay cache backup|restore|verify
    args = parser.parse_args(argv)
    if args.command != "serve":
        return int(args.run(args))
    return _serve(args)


if __name__ == "__main__":
    sys.exit(main())
