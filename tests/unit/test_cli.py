"""relay.cli in-process: the command line, and how a failed start becomes one line and an
exit status (the running relay is tested as a subprocess in tests/integration/test_cli.py)."""

from __future__ import annotations

import gc
import socket
from pathlib import Path

import pytest

from relay import __version__
from relay.cli import main


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


# Tornado's bind_sockets leaves its socket unclosed when bind fails (the process exits
# right after, so only this in-process test sees it): collected here, and not reported.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_port_in_use_stops_startup_with_one_line(
    env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env.setenv("RELAY_PORT", str(taken.getsockname()[1]))
        env.setenv("OPENAI_API_KEY", "sk-test")  # no offline fake to start
        env.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
        assert main(["serve"]) == 1
    gc.collect()
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == "relay: cannot start: Address already in use"
    assert "sk-test" not in "\n".join(err)
