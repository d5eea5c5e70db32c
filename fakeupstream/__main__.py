"""``python -m fakeupstream --port N``: serve the fake until interrupted.

Prints one line, ``fakeupstream listening on http://HOST:PORT`` (the bound port when
``--port 0``), then serves. Drive it over HTTP under ``/__fake/`` (see
:mod:`fakeupstream.fake`). ``--cassette PATH`` plays a recorded cassette back instead of
generating answers (see :mod:`fakeupstream.cassette_playback`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from fakeupstream.cassette_playback import Playback
from fakeupstream.fake import FakeUpstream, log, origin
from fakeupstream.strict_chat import RULES, Strictness


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m fakeupstream", description="A scriptable fake of OpenAI's Responses API."
    )
    parser.add_argument("--port", type=int, required=True, help="port to listen on; 0 picks one")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--api-key",
        action="extend",
        nargs="+",
        dest="api_keys",
        metavar="KEY",
        help="accept only these keys (repeatable); without it any Bearer key is accepted",
    )
    parser.add_argument("--record-file", help="append every request record as a JSON line")
    parser.add_argument("--seed", type=int, help="seed for ids, secrets and random toxics")
    parser.add_argument(
        "--max-records", type=int, default=1000, help="recorded requests kept (default 1000)"
    )
    parser.add_argument("--quiet", action="store_true", help="no request log on stderr")
    parser.add_argument(
        "--strict",
        default="tool_turns",
        choices=RULES,
        help="reasoning_content rule of POST /v1/chat/completions (default tool_turns)",
    )
    parser.add_argument(
        "--strict-prefix",
        action="store_true",
        help="put 'Param Incorrect: ' before the strict rule's error text",
    )
    parser.add_argument(
        "--secret-hex", help="HMAC key for encrypted_content, hex (default: random per process)"
    )
    parser.add_argument(
        "--cassette", metavar="PATH", help="answer every /v1/ request from this vcrpy cassette"
    )
    parser.add_argument(
        "--cassette-timing",
        type=float,
        default=1.0,
        metavar="FACTOR",
        help="scale the recorded delays between chunks (default 1; 0: no delays)",
    )
    parser.add_argument(
        "--files-dir",
        metavar="DIR",
        help="the only directory a script's raw_sse_file or the cassette control's path may "
        "name a file under (default: none, so those controls read no file)",
    )
    parser.add_argument(
        "--cassette-any-body",
        action="store_true",
        help="match recorded requests by method and path only, not by body",
    )
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    secret = bytes.fromhex(args.secret_hex) if args.secret_hex else None
    playback = None
    if args.cassette is not None:
        playback = Playback.open(
            args.cassette, timing=args.cassette_timing, match_body=not args.cassette_any_body
        )
    fake = FakeUpstream(
        seed=args.seed,
        api_keys=args.api_keys,
        secret=secret,
        record_path=args.record_file,
        max_records=args.max_records,
        strict=Strictness(args.strict, args.strict_prefix),
        cassette=playback,
        files_dir=args.files_dir,
    )
    port = await fake.start(args.host, args.port)
    print(f"fakeupstream listening on {origin(args.host, port)}", flush=True)
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, done.set)
    await done.wait()
    await fake.stop()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.quiet:  # one line per request on stderr, for the harness's logs
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s fakeupstream %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.DEBUG)
    try:
        asyncio.run(serve(args))
    except OSError as error:  # e.g. the port is taken: say so in one line
        print(f"fakeupstream: cannot listen on {args.host}:{args.port}: {error}", file=sys.stderr)
        return 1
    except ValueError as error:
        print(f"fakeupstream: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
