"""relay.app.cli in-process: the command line, and how a failed start becomes one line and an
exit status (the running relay is tested as a subprocess in tests/integration/test_cli.py)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from relay import __version__
from relay.app.cli import main


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in ("RELAY_PORT", "RELAY_HOST", "RELAY_TOKEN", "OPENAI_API_KEY", "OPENAI_BASE_URL",
                 "RELAY_MODEL_ALIASES", "RELAY_PROVIDERS", "REASONING_CACHE_ENABLED"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RELAY_DATA_DIR", str(tmp_path / "data"))
    return monkeypatch


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"relay {__version__}"


@pytest.mark.parametrize("argv", [[], ["start"]])
def test_serve_is_the_one_command(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert "serve" in capsys.readouterr().err


def test_an_invalid_variable_stops_startup_with_one_line(
    env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    env.setenv("RELAY_PORT", "x")
    assert main(["serve"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "relay: configuration error: RELAY_PORT='x': expected a whole number >= 0"
    ]
    assert not (tmp_path / "data").exists()  # refused before anything was made


def test_a_port_in_use_stops_startup_with_one_line(
    env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env.setenv("RELAY_PORT", str(port))
        env.setenv("OPENAI_API_KEY", "sk-test")  # no offline fake to start
        env.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
        env.setenv("REASONING_CACHE_ENABLED", "1")
        assert main(["serve"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"relay: cannot start: 127.0.0.1:{port} is in use (RELAY_PORT)"]
    assert list((tmp_path / "data").iterdir()) == []  # no store, no token, no socket


@pytest.mark.parametrize(("argv", "line"), [
    (["serve", "--port", "http"],
     "relay: configuration error: --port='http': expected a whole number >= 0 (RELAY_PORT)"),
    (["serve", "--port", "70000"],
     "relay: configuration error: --port=70000: expected a TCP port from 0 to 65535 (RELAY_PORT)"),
    (["serve", "--env-file", "/nonexistent/relay.env"],
     "relay: configuration error: --env-file /nonexistent/relay.env: cannot read it: "
     "No such file or directory"),
])  # fmt: skip
def test_a_bad_flag_is_one_line_naming_the_flag(
    env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str], line: str
) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [line]


def test_a_bad_env_file_line_is_one_line_naming_file_and_line(
    env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "relay.env"
    path.write_text("# settings\nRELAY_LOG_LEVEL=loud\n")
    assert main(["serve", "--env-file", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"relay: configuration error: {path}:2: RELAY_LOG_LEVEL='loud': expected debug, info, "
        "warning or error"
    ]


def test_a_data_dir_flag_that_cannot_be_used_is_named_as_the_flag(
    env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    taken = tmp_path / "a-file"
    taken.write_text("not a directory")
    env.setenv("OPENAI_API_KEY", "sk-test")
    assert main(["serve", "--port", "0", "--data-dir", str(taken)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"relay: configuration error: the data directory {taken} (--data-dir, RELAY_DATA_DIR) "
        "exists and is not a directory; remove it or choose another"
    ]
