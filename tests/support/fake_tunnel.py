"""A stand-in for ngrok and cloudflared, run as ``RELAY_TUNNEL_CMD`` by the tunnel tests.

``python fake_tunnel.py --style ngrok --port {port} --state DIR`` prints what the real
program prints when a tunnel comes up (ngrok's ``--log stdout`` logfmt or JSON lines on
stdout, cloudflared's banner on stderr, or nothing), then waits:

* SIGTERM: it says so and exits 0, like the real ones, unless ``--ignore-sigterm``;
* SIGUSR1: it dies on demand, printing error lines first (with ``--leak-env NAME``, lines
  that quote that variable's value, the way ngrok quotes a bad authtoken), exit status
  ``--exit-code``.

* SIGUSR2, with ``--flood``: it prints URL lines as fast as it can (like ``yes
  https://…``; a thousand distinct hosts, over and over) until it is killed, which
  SIGTERM then does at once.

Into ``--state`` it writes ``pid``, ``port`` (the argument it was given), ``env`` (the
names of its environment variables) and, with ``--grandchild``, ``grandchild``: the pid
of a process it leaves running in its own process group. With ``--setsid-grandchild``,
``setsid-grandchild``: one that left the group (``setsid``) with an empty environment;
with ``--daemon``, ``daemon``: one that left the group and whose parent (a helper the
stand-in started) has exited, the way a daemonizing program leaves one. All are written
before the URL is printed, so a test that has seen the URL may read them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_URLS = {
    "ngrok": "https://1a2b-203-0-113-5.ngrok-free.app",
    "ngrok-json": "https://5e6f-198-51-100-7.ngrok-free.app",
    "cloudflared": "https://four-dashed-word-url.trycloudflare.com",
}


def stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())


def ngrok_lines(port: str, url: str) -> list[str]:
    t = stamp() + "+0000"
    return [
        f't={t} lvl=info msg="no configuration paths supplied"',
        f't={t} lvl=info msg="open config file" path=/root/.config/ngrok/ngrok.yml err=nil',
        f't={t} lvl=info msg="starting web service" obj=web addr=127.0.0.1:4040 allow_hosts=[]',
        f't={t} lvl=info msg="client session established" obj=tunnels.session',
        f't={t} lvl=info msg="tunnel session started" obj=tunnels.session',
        f't={t} lvl=info msg="started tunnel" obj=tunnels name=command_line '
        f"addr=http://localhost:{port} url={url}",
    ]


def ngrok_json_lines(port: str, url: str) -> list[str]:
    t = stamp() + "Z"
    records: list[dict[str, str]] = [
        {"lvl": "info", "msg": "no configuration paths supplied", "t": t},
        {"addr": "127.0.0.1:4040", "lvl": "info", "msg": "starting web service", "t": t},
        {"lvl": "info", "msg": "tunnel session started", "obj": "tunnels.session", "t": t},
        {
            "addr": f"http://localhost:{port}",
            "lvl": "info",
            "msg": "started tunnel",
            "name": "command_line",
            "obj": "tunnels",
            "t": t,
            "url": url,
        },
    ]
    return [json.dumps(record, sort_keys=True) for record in records]


def cloudflared_lines(port: str, url: str) -> list[str]:
    t = stamp() + "Z"
    rule = "+" + "-" * 92 + "+"
    return [
        f"{t} INF Thank you for trying Cloudflare Tunnel. Doing so, without a Cloudflare "
        "account, is a quick way to experiment and try it out. However, be aware that these "
        "account-less Tunnels have no uptime guarantee, are subject to the Cloudflare Online "
        "Services Terms of Use (https://www.cloudflare.com/website-terms/), and Cloudflare "
        "reserves the right to investigate your use of Tunnels for violations of such terms. "
        "If you intend to use Tunnels in production you should use a pre-created named tunnel "
        "by following: https://developers.cloudflare.com/cloudflare-one/connections/connect-apps",
        f"{t} INF Requesting new quick Tunnel on trycloudflare.com...",
        f"{t} INF {rule}",
        f"{t} INF |  Your quick Tunnel has been created! Visit it at (it may take some time "
        "to be reachable):  |",
        f"{t} INF |  {url:<88}  |",
        f"{t} INF {rule}",
        f"{t} INF Version 2024.4.1",
        f"{t} INF Settings: map[ha-connections:1 protocol:quic url:http://127.0.0.1:{port}]",
        f"{t} INF Starting metrics server on 127.0.0.1:20241/metrics",
    ]


def death_lines(style: str, leaked: str | None) -> list[str]:
    secret = leaked or "none"
    if style.startswith("ngrok"):
        return [
            f't={stamp()}+0000 lvl=eror msg="session closing" obj=tunnels.session '
            f'err="authentication failed: The authtoken you specified is invalid: {secret}"',
            f"ERROR:  authtoken {secret} was rejected",
            "ERROR:  ERR_NGROK_107",
        ]
    return [
        f'{stamp()}Z ERR Connection terminated error="token {secret} revoked"',
        f"{stamp()}Z ERR failed to serve tunnel connection {secret}",
    ]


SLEEPER = "import time\nwhile True: time.sleep(60)"
# Started by the stand-in; starts a sleeper in a session of its own, says its pid, exits.
DAEMONIZER = (
    "import subprocess, sys\n"
    "child = subprocess.Popen([sys.executable, '-c', sys.argv[1]], start_new_session=True,\n"
    "    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "print(child.pid)\n"
)
FLOOD = "".join(f"https://flood-{i}.example.com\n" for i in range(1000)).encode()


def leave_group(state: Path, *, daemon: bool) -> None:
    if daemon:
        helper = subprocess.run(
            [sys.executable, "-c", DAEMONIZER, SLEEPER],
            stdin=subprocess.DEVNULL, capture_output=True, check=True, text=True,
        )  # fmt: skip
        (state / "daemon").write_text(helper.stdout.strip())
        return
    child = subprocess.Popen(
        [sys.executable, "-c", SLEEPER],
        start_new_session=True,
        env={},  # no mark: found by its ancestry
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    (state / "setsid-grandchild").write_text(str(child.pid))


def flood() -> int:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # now it just kills
    out = sys.stdout.buffer
    while True:
        out.write(FLOOD)
        out.flush()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--style", choices=["ngrok", "ngrok-json", "cloudflared", "silent"])
    parser.add_argument("--port", required=True)
    parser.add_argument("--url")
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--grandchild", action="store_true")
    parser.add_argument("--setsid-grandchild", action="store_true")
    parser.add_argument("--daemon", action="store_true")
    parser.add_argument("--flood", action="store_true")
    parser.add_argument("--leak-env")
    parser.add_argument("--exit-code", type=int, default=3)
    args = parser.parse_args()

    state: Path = args.state
    state.mkdir(parents=True, exist_ok=True)
    (state / "port").write_text(args.port)
    (state / "env").write_text(json.dumps(sorted(os.environ)))
    if args.grandchild:
        child = subprocess.Popen(  # same process group: the relay's group kill reaches it
            [sys.executable, "-c", "import time\nwhile True: time.sleep(60)"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        (state / "grandchild").write_text(str(child.pid))
    if args.setsid_grandchild:
        leave_group(state, daemon=False)
    if args.daemon:
        leave_group(state, daemon=True)
    # Signals wait in sigwait below (no handler race); blocked only now, after the
    # grandchild started, since it would inherit the mask.
    awaited = {signal.SIGUSR1} if args.ignore_sigterm else {signal.SIGUSR1, signal.SIGTERM}
    if args.flood:
        awaited.add(signal.SIGUSR2)
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, awaited)
    (state / "pid").write_text(str(os.getpid()))

    style = args.style
    url = args.url or DEFAULT_URLS.get(style, "")
    lines = {
        "ngrok": ngrok_lines,
        "ngrok-json": ngrok_json_lines,
        "cloudflared": cloudflared_lines,
    }.get(style)
    out = sys.stderr if style == "cloudflared" else sys.stdout  # as the real programs do
    for line in lines(args.port, url) if lines is not None else []:
        print(line, file=out, flush=True)

    received = signal.sigwait(awaited)
    if received == signal.SIGUSR2:
        return flood()
    if received == signal.SIGTERM:
        print(f"{stamp()} INF received stop signal, shutting down", file=out, flush=True)
        return 0
    leaked = os.environ.get(args.leak_env) if args.leak_env else None
    for line in death_lines(style, leaked):
        print(line, file=out, flush=True)
    return int(args.exit_code)


if __name__ == "__main__":
    sys.exit(main())
