"""Hypothesis strategies for the relay's two line protocols (fuzzed by tests/integration/
test_fuzz.py): request lines for the admin socket, and what a tunnel program prints.

Both start from what the real peer sends (``{"command": "status"}``; ngrok's logfmt and
JSON lines, cloudflared's banner) and add the lines that broke them: nested deeper than
the interpreter's recursion limit, longer than the limit, not UTF-8, terminal escapes,
NUL bytes, lone CRs, and URLs that must not be announced.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from hypothesis import strategies as st

from relay.ops.admin_protocol import MAX_REQUEST_BYTES

# --- admin socket request lines -------------------------------------------------------

COMMANDS = ["status", "metrics", "vacuum", "", "STATUS", "status\u0000", "snapshot\n"]
ODD_VALUES = [None, 1, 1.5, True, [], {}, ["status"], {"command": "status"}, "\udcff"]


def _deep(opener: str, closer: str, depth: int, middle: str) -> bytes:
    return (opener * depth + middle + closer * depth).encode()


def _request(command: object, extra: dict[str, object]) -> bytes:
    return json.dumps({"command": command, **extra}).encode("utf-8", "surrogatepass")


admin_bodies = st.one_of(
    st.builds(
        _request,
        st.sampled_from(COMMANDS + ODD_VALUES),
        st.dictionaries(
            st.sampled_from(["sql", "path", "args", "command "]),
            st.sampled_from(ODD_VALUES + COMMANDS),
            max_size=2,
        ),
    ),
    st.builds(
        _deep,
        st.sampled_from(["[", '{"command":', '{"a":[', " ["]),
        st.sampled_from(["]", "}", "]}", ""]),
        st.integers(0, 1_100),  # within the line limit and past the recursion limit
        st.sampled_from(['"status"', "", "1", "null"]),
    ),
    st.binary(max_size=200),  # mostly not UTF-8, mostly not JSON
    st.text(max_size=100).map(lambda text: text.encode("utf-8", "surrogatepass")),
    st.builds(
        lambda size, fill: fill * size,
        st.integers(MAX_REQUEST_BYTES - 8, 4 * MAX_REQUEST_BYTES),
        st.sampled_from([b"x", b"[", b'{"command":"status"}', b"\xff"]),
    ),
    st.builds(  # valid JSON, then bytes that are not UTF-8
        lambda body, junk: body[:-1] + junk + body[-1:],
        st.just(b'{"command": "status"}'),
        st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00"]),
    ),
)
admin_lines = admin_bodies.map(lambda body: body + b"\n")


# --- tunnel output --------------------------------------------------------------------

T = "t=2024-05-01T10:00:00+0000"
CF = "2024-05-01T10:00:00Z"
HOST = st.builds(
    lambda name, n: f"{name}{n}.fuzz-tunnel.app",
    st.sampled_from(["a", "tunnel-", "x1-"]),
    st.integers(0, 10**6),
)
ANNOUNCEMENTS = [
    lambda url: f'{T} lvl=info msg="started tunnel" obj=tunnels url={url}',
    lambda url: json.dumps({"lvl": "info", "msg": "started tunnel", "url": url}),
    lambda url: f"{CF} INF |  {url:<88}  |",
    lambda url: f"Forwarding {url} -> http://localhost:8787",
]
JUNK = [
    "[" * 2_000,  # past the recursion limit
    '{"url": "https://inside.example.com", "x": ' + "[" * 1_500,
    '{"lvl": "info", "url": ' * 100 + '"https://deep.example.com"',
    f'{T} lvl=eror msg="session closing" url=https://error.example.com',
    f"{CF} ERR failed https://err.example.com",
    "https://localhost https://10.0.0.1 https://[::1] http://plain.example.com",
    "https://tunnel.example.com/path?token=abc",
    "\x1b[31m\x1b]0;title\x07\x00\x7f\x9b",
    "x" * 17_000,  # over the 16 KiB line limit: cut, the rest dropped
    '{"url": 7, "msg": null}',
    'lvl= url="https://unterminated.example.com',
]


@dataclass(frozen=True)
class TunnelCase:
    """What a tunnel printed (cut into reads as ``chunks``) and the URL in its last line."""

    chunks: tuple[bytes, ...]
    url: str


def _tunnel_case(
    junk: list[bytes], host: str, shape: int, newline: bytes, cuts: list[int]
) -> TunnelCase:
    url = f"https://{host}"
    needle = ANNOUNCEMENTS[shape](url).encode()
    data = b"".join(line + newline for line in junk) + needle + newline
    pieces, start = [], 0
    for cut in sorted({min(c, len(data)) for c in cuts}):
        pieces.append(data[start:cut])
        start = cut
    pieces.append(data[start:])
    return TunnelCase(tuple(pieces), url)


junk_lines = st.one_of(
    st.sampled_from(JUNK).map(str.encode),
    st.binary(max_size=120).map(lambda data: data.replace(b"\n", b" ").replace(b"\r", b" ")),
    st.text(max_size=80).map(
        lambda text: text.encode("utf-8", "surrogatepass").replace(b"\n", b"").replace(b"\r", b"")
    ),
    st.builds(
        lambda depth, opener: (opener * depth).encode(),
        st.integers(900, 2_500),
        st.sampled_from(["[", '{"a":', '{"url":[']),
    ),
)
tunnel_cases = st.builds(
    _tunnel_case,
    st.lists(junk_lines, max_size=4),
    HOST,
    st.integers(0, len(ANNOUNCEMENTS) - 1),
    st.sampled_from([b"\n", b"\r\n", b"\r"]),
    st.lists(st.integers(0, 60_000), max_size=6),
)
