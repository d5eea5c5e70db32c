"""RELAY_TUNNEL_CMD: split like a shell, ``{port}`` substituted, mistakes refused at startup."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.errors import ConfigError
from relay.settings.config import load_config
from relay.settings.tunnel_command import TunnelCommand, parse_tunnel_command


@pytest.fixture
def bin_dir(tmp_path: Path) -> str:
    """A PATH holding executable ``ngrok`` and ``cloudflared`` stand-ins."""
    for name in ("ngrok", "cloudflared"):
        program = tmp_path / name
        program.write_text("#!/bin/sh\nexit 0\n")
        program.chmod(0o755)
    (tmp_path / "not-executable").write_text("")
    return str(tmp_path)


def test_unset_or_blank_means_no_tunnel() -> None:
    assert parse_tunnel_command(None) is None
    assert parse_tunnel_command("  ") is None
    assert load_config({}).tunnel_command is None


@pytest.mark.parametrize(
    ("raw", "port", "argv"),
    [
        ("ngrok http {port} --log stdout", 8787, ["ngrok", "http", "8787", "--log", "stdout"]),
        (
            "cloudflared tunnel --url http://127.0.0.1:{port}",
            41234,
            ["cloudflared", "tunnel", "--url", "http://127.0.0.1:41234"],
        ),
        ("ngrok http '{port}' --url='my name'", 9, ["ngrok", "http", "9", "--url=my name"]),
        ("ngrok http {port}{port}", 1, ["ngrok", "http", "11"]),
        # Braces that do not hold a bare name are not placeholders.
        (
            """ngrok http {port} --metadata '{"a": 1}'""",
            5,
            ["ngrok", "http", "5", "--metadata", '{"a": 1}'],
        ),
        ("ngrok start relay", 5, ["ngrok", "start", "relay"]),  # a config file's tunnel
    ],
)
def test_the_port_is_substituted_at_start(
    raw: str, port: int, argv: list[str], bin_dir: str
) -> None:
    command = parse_tunnel_command(raw, bin_dir)
    assert command is not None
    assert command.argv(port) == argv
    assert command.template[0] == argv[0]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            "ngrok http {prot}",
            "RELAY_TUNNEL_CMD: unknown placeholder {prot}; only {port} (the relay's listening "
            "port) is substituted",
        ),
        ("ngrok http {}", "RELAY_TUNNEL_CMD: unknown placeholder {}; only {port}"),
        ("ngrok http {host}:{port}", "RELAY_TUNNEL_CMD: unknown placeholder {host}"),
        ("ngrok http 'unterminated", "RELAY_TUNNEL_CMD: cannot split the command line"),
        ("{port} http", "RELAY_TUNNEL_CMD: {port} cannot be part of the program name"),
        (
            "no-such-tunnel-program http {port}",
            "RELAY_TUNNEL_CMD: program 'no-such-tunnel-program' not found or not executable on "
            "PATH; install it or give its full path",
        ),
        ("not-executable http", "RELAY_TUNNEL_CMD: program 'not-executable' not found"),
        (
            "NGROK_AUTHTOKEN=2AbCdEfGh ngrok http {port}",
            "RELAY_TUNNEL_CMD: starts with a variable assignment; no shell runs the command",
        ),
    ],
)
def test_mistakes_stop_startup_with_one_line(raw: str, message: str, bin_dir: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_tunnel_command(raw, bin_dir)
    text = str(err.value)
    assert text.startswith(message)
    assert "\n" not in text
    assert "2AbCdEfGh" not in text


def test_a_full_path_needs_no_path_lookup(tmp_path: Path) -> None:
    command = parse_tunnel_command(f"{sys.executable} -m http.server {{port}}", str(tmp_path))
    assert command == TunnelCommand((sys.executable, "-m", "http.server", "{port}"))
    assert command.program == Path(sys.executable).name
    with pytest.raises(ConfigError, match=r"not found or not executable; install"):
        parse_tunnel_command(str(tmp_path / "missing") + " x", str(tmp_path))


def test_the_config_reads_it_with_its_path(bin_dir: str) -> None:
    config = load_config({"RELAY_TUNNEL_CMD": "ngrok http {port} --log stdout", "PATH": bin_dir})
    assert config.tunnel_command == TunnelCommand(("ngrok", "http", "{port}", "--log", "stdout"))
    with pytest.raises(ConfigError, match=r"^RELAY_TUNNEL_CMD: unknown placeholder \{po\}"):
        load_config({"RELAY_TUNNEL_CMD": "ngrok http {po}", "PATH": bin_dir})


WORD = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_.:/=", min_size=1, max_size=12)


@given(words=st.lists(WORD, max_size=6), port=st.integers(0, 65535))
def test_substitution_touches_only_the_placeholder(words: list[str], port: int) -> None:
    command = TunnelCommand(("ngrok", *words, "{port}", *(w + "{port}" for w in words)))
    argv = command.argv(port)
    assert argv == ["ngrok", *words, str(port), *(w + str(port) for w in words)]
