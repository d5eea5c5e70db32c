"""The tunnel output parser: which lines announce a public URL, and what is safe to show."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from relay.tunnel.output import (
    MAX_SHOWN_CHARS,
    REDACTED,
    LineSplitter,
    public_origin,
    public_url,
    sanitize,
)

NGROK = "https://1a2b-203-0-113-5.ngrok-free.app"
CLOUDFLARE = "https://four-dashed-word-url.trycloudflare.com"
T = "t=2024-05-01T10:00:00+0000"
CF = "2024-05-01T10:00:00Z"


@pytest.mark.parametrize(
    ("line", "url"),
    [
        # ngrok --log stdout (logfmt): the started-tunnel line; addr is the local side.
        (
            f'{T} lvl=info msg="started tunnel" obj=tunnels name=command_line '
            f"addr=http://localhost:8787 url={NGROK}",
            NGROK,
        ),
        (f'{T} lvl=info msg="started tunnel" url="{NGROK}"', NGROK),
        # ngrok 2 printed an http and an https tunnel; only the https one counts.
        (f'{T} lvl=info msg="started tunnel" url=http://abcd.ngrok.io', None),
        # log15-style ngrok 2 lines (level prefix, then key=value pairs).
        (f"INFO[05-01|10:00:00] started tunnel obj=tunnels url={NGROK}", NGROK),
        (f"EROR[05-01|10:00:00] failed obj=tunnels url={NGROK}", None),
        # logfmt lines say where the URL is; other https links in them do not count.
        (f'{T} lvl=info msg="update available https://ngrok.com" obj=updater', None),
        (f'{T} lvl=warn msg="started tunnel" url={NGROK}', None),
        (f'{T} lvl=eror msg="session closing" url={NGROK}', None),
        (f'{T} lvl=info msg="open config file" path=/root/ngrok.yml err=nil', None),
        # ngrok --log-format json.
        (
            json.dumps(
                {
                    "addr": "http://localhost:8787",
                    "lvl": "info",
                    "msg": "started tunnel",
                    "url": NGROK,
                }
            ),
            NGROK,
        ),
        (json.dumps({"lvl": "error", "msg": "x", "url": NGROK}), None),
        (json.dumps({"lvl": "info", "msg": "x", "addr": "https://203.0.113.9"}), None),
        (json.dumps({"level": "info", "message": f"|  {CLOUDFLARE}  |"}), CLOUDFLARE),
        (json.dumps([NGROK]), None),
        ("{not json " + NGROK, NGROK),  # not JSON: read as text
        # cloudflared's box banner, on its own line and with the log prefix.
        (f"{CF} INF |  {CLOUDFLARE}                                            |", CLOUDFLARE),
        (f"|  {CLOUDFLARE}  |", CLOUDFLARE),
        (f"\x1b[32m{CF}\x1b[0m INF |  {CLOUDFLARE}  |", CLOUDFLARE),
        # ... and the rest of its output: documentation and API links carry a path.
        (
            f"{CF} INF Thank you for trying Cloudflare Tunnel. ... Terms of Use "
            "(https://www.cloudflare.com/website-terms/), ... by following: "
            "https://developers.cloudflare.com/cloudflare-one/connections/connect-apps",
            None,
        ),
        (
            'failed to request quick Tunnel: Post "https://api.trycloudflare.com/tunnel": '
            "dial tcp: lookup api.trycloudflare.com: no such host",
            None,
        ),
        (f"{CF} INF Requesting new quick Tunnel on trycloudflare.com...", None),
        (f"{CF} INF Settings: map[url:http://127.0.0.1:8787]", None),
        (f"{CF} ERR |  {CLOUDFLARE}  |", None),
        (f"{CF} WRN |  {CLOUDFLARE}  |", None),
        # Any other program: a bare https origin in the line.
        (f"Forwarding {NGROK} -> http://localhost:8787", NGROK),
        ("your url is: https://Tunnel.Example.COM.", "https://tunnel.example.com"),
        ("your url is: https://tunnel.example.com:443/", "https://tunnel.example.com"),
        ("your url is: https://tunnel.example.com:8443", "https://tunnel.example.com:8443"),
        ("your url is: https://93.184.215.14", "https://93.184.215.14"),
        ("https://203.0.113.9", None),  # documentation range: not a public address
        # Never http, never the local address, never something that is not an origin.
        ("http://tunnel.example.com", None),
        ("https://127.0.0.1:8787", None),
        ("https://localhost:8787", None),
        ("https://relay.localhost", None),
        ("https://10.1.2.3", None),
        ("https://192.168.1.5:8787", None),
        ("https://169.254.0.1", None),
        ("https://0.0.0.0:8787", None),
        ("https://printer.local", None),
        ("https://intranet", None),
        ("https://user:pass@tunnel.example.com", None),
        ("https://tunnel.example.com/?token=abc", None),
        ("https://tunnel.example.com#frag", None),
        ("https://tunnel.example.com/v1", None),
        ("https://tunnel.example.com:99999", None),
        ("https://-bad-.example.com", None),
        ("https://999.1.1.1", None),
        ("", None),
    ],
)
def test_public_url(line: str, url: str | None) -> None:
    assert public_url(line) == url


def test_ipv6_origins() -> None:
    assert public_origin("https://[2001:4860::8888]:8443") == "https://[2001:4860::8888]:8443"
    assert public_origin("https://[::1]:8787") is None
    assert public_origin("https://[fd00::1]") is None


@pytest.mark.parametrize(
    ("line", "secrets", "shown"),
    [
        ("plain words stay", (), "plain words stay"),
        ("value abcdefgh here", ("abcdefgh",), f"value {REDACTED} here"),
        ('err="authtoken=xyz was rejected"', (), f'err="authtoken={REDACTED} was rejected"'),
        ("NGROK_AUTHTOKEN: xyz", (), f"NGROK_AUTHTOKEN: {REDACTED}"),
        ('{"api_key": "sk-x", "n": 1}', (), f'{{"api_key": {REDACTED}, "n": 1}}'),
        ("password='a b c' ok", (), f"password={REDACTED} ok"),
        ("Authorization: Bearer sk-123", (), f"Authorization: {REDACTED} {REDACTED}"),
        ("sent Bearer abc.def", (), f"sent Bearer {REDACTED}"),
        ("to https://bob:pw@example.com/x", (), f"to https://{REDACTED}@example.com/x"),
        ("to https://example.com/x?sig=abc&b=2 ok", (), f"to https://example.com/x?{REDACTED} ok"),
        (
            "Your authtoken: 2AbCdEfGhIjKlMnOpQrStUvWxYz_1a2B3c4D5e6F7g8H9i0",
            (),
            f"Your authtoken: {REDACTED}",
        ),
        ("got 2AbCdEfGhIjKlMnOpQrStUvWxYz_1a2B3c4D5e6F7 back", (), f"got {REDACTED} back"),
        # Long runs without both letters and digits are words or numbers, not tokens.
        ("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", (), "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
        ("four-dashed-word-url.trycloudflare.com", (), "four-dashed-word-url.trycloudflare.com"),
        ("\x1b[31mred\x1b[0m\x07 bell\ttab", (), "red bell tab"),
        ("ab\x1b[0mcdefgh", ("abcdefgh",), REDACTED),
    ],
)
def test_sanitize(line: str, secrets: tuple[str, ...], shown: str) -> None:
    assert sanitize(line, secrets) == shown


def test_sanitize_caps_the_length() -> None:
    shown = sanitize("word " * 200)
    assert len(shown) == MAX_SHOWN_CHARS and shown.endswith("...")


SECRET_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"


@given(
    before=st.text(max_size=200),
    secret=st.text(SECRET_ALPHABET, min_size=8, max_size=64),
    after=st.text(max_size=200),
)
@example(before="authtoken=", secret="2AbCdEfGhIjK", after="\x1b[0m")
def test_a_known_secret_is_never_shown(before: str, secret: str, after: str) -> None:
    shown = sanitize(before + secret + after, [secret])
    assert secret not in shown
    assert len(shown) <= MAX_SHOWN_CHARS
    assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in shown)


@given(st.text(st.characters(codec="utf-8"), max_size=300))
def test_whatever_the_line_an_announced_url_is_a_public_https_origin(line: str) -> None:
    url = public_url(line)
    if url is not None:
        assert url.startswith("https://")
        assert public_origin(url) == url  # a normalised, public origin: no path, no local host


LABEL = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?\Z")
HOST = st.builds(
    lambda labels, tld: ".".join([*labels, tld]),
    st.lists(LABEL, min_size=1, max_size=3),
    st.sampled_from(["app", "com", "io", "dev"]),
)
SHAPES = [
    lambda url: f'{T} lvl=info msg="started tunnel" addr=http://localhost:8787 url={url}',
    lambda url: json.dumps({"lvl": "info", "msg": "started tunnel", "url": url}),
    lambda url: f"{CF} INF |  {url:<88}  |",
    lambda url: f"Forwarding {url} -> http://127.0.0.1:8787",
]


@given(host=HOST, shape=st.sampled_from(SHAPES))
def test_every_shape_of_announcement_yields_its_url(host: str, shape: object) -> None:
    url = f"https://{host}"
    assert callable(shape)
    assert public_url(shape(url)) == url
    assert public_url(shape(f"http://{host}")) is None


@given(
    lines=st.lists(st.text("abc xyz\x1b", min_size=1, max_size=40), max_size=12),
    cuts=st.lists(st.integers(0, 600), max_size=8),
    newline=st.sampled_from([b"\n", b"\r\n", b"\r"]),
)
def test_line_splitting_does_not_depend_on_how_the_bytes_arrive(
    lines: list[str], cuts: list[int], newline: bytes
) -> None:
    data = b"".join(line.encode() + newline for line in lines)
    whole = LineSplitter(max_bytes=16)
    expected = whole.feed(data) + whole.close()
    pieces, start = [], 0
    for cut in sorted({min(c, len(data)) for c in cuts}):
        pieces.append(data[start:cut])
        start = cut
    pieces.append(data[start:])
    split = LineSplitter(max_bytes=16)
    got = [line for piece in pieces for line in split.feed(piece)] + split.close()
    assert got == expected
    assert expected == [line[:16] for line in lines if line[:16].strip()]


def test_an_overlong_line_is_cut_and_the_rest_dropped() -> None:
    split = LineSplitter(max_bytes=8)
    assert split.feed(b"0123456789abcdef") == ["01234567"]
    assert split.feed(b"more of the same line\nnext\npart") == ["next"]
    assert split.close() == ["part"]
    assert LineSplitter().feed("caf\u00e9 \xff\n".encode("latin-1")) == ["caf\ufffd \ufffd"]


@pytest.mark.parametrize(
    ("line", "url"),
    [
        ("[" * 16_000, None),  # as long as a line gets, nested past the recursion limit
        ("[" * 5_000 + "]" * 5_000, None),
        # Not JSON the relay reads, so read as text, like any line that is not JSON.
        ('{"url": ' * 2_000 + '"https://deep.example.com"' + "}" * 2_000,
         "https://deep.example.com"),
    ],
)  # fmt: skip
def test_a_deeply_nested_json_line_is_read_as_text_and_raises_nothing(
    line: str, url: str | None
) -> None:
    assert public_url(line) == url
    assert len(sanitize(line)) <= MAX_SHOWN_CHARS


@given(
    depth=st.integers(0, 6_000),
    opener=st.sampled_from(["[", '{"a":', '{"url":[']),
    tail=st.text(max_size=40),
)
def test_whatever_the_nesting_public_url_returns(depth: int, opener: str, tail: str) -> None:
    line = opener * depth + tail
    url = public_url(line)
    assert url is None or public_origin(url) == url
