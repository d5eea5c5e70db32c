"""The operating variables of relay.settings.config (the admin socket, snapshots, /metrics, token accounting)."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.core.token_usage import Price
from relay.errors import ConfigError
from relay.settings.config import load_config


def test_the_admin_socket_is_on_in_the_data_dir_and_metrics_off_by_default() -> None:
    config = load_config({})
    assert config.data_dir == Path.cwd() / "data"
    assert config.admin_socket == Path.cwd() / "data" / "run" / "admin.sock"
    assert config.metrics_port is None
    assert config.admin_snapshot_dir == Path("~/.openai-relay-inspection")


def test_relative_paths_are_made_absolute_once_at_startup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config({"RELAY_DATA_DIR": "state/../relay", "REASONING_CACHE_PATH": "c.db",
                          "RELAY_ADMIN_SOCKET": "a.sock"})  # fmt: skip
    monkeypatch.chdir("/")
    assert config.data_dir == tmp_path / "state/../relay"  # ".." is the OS's to resolve
    assert config.cache_path == tmp_path / "c.db"
    assert config.admin_socket == tmp_path / "a.sock"
    home = load_config({"RELAY_DATA_DIR": "~/relay-data"}).data_dir
    assert home == Path.home() / "relay-data"


@pytest.mark.parametrize(("env", "field", "value"), [
    ({"RELAY_ADMIN_SOCKET": "/run/relay/admin.sock"}, "admin_socket", Path("/run/relay/admin.sock")),
    ({"RELAY_ADMIN_SOCKET": "off"}, "admin_socket", None),
    ({"RELAY_ADMIN_SOCKET": " OFF "}, "admin_socket", None),
    ({"RELAY_ADMIN_SOCKET": "  ", "RELAY_DATA_DIR": "/srv/d"}, "admin_socket",
     Path("/srv/d/run/admin.sock")),
    ({"RELAY_DROP_UNSUPPORTED_PARAMS": "1"}, "drop_unsupported_params", True),
    ({}, "drop_unsupported_params", False),
    ({"RELAY_METRICS_PORT": "8787", "RELAY_PORT": "8788"}, "metrics_port", 8787),
    ({"RELAY_METRICS_PORT": "0", "RELAY_PORT": "0"}, "metrics_port", 0),
    ({"RELAY_ADMIN_SNAPSHOT_DIR": "/srv/x"}, "admin_snapshot_dir", Path("/srv/x")),
    ({"RELAY_METRICS_PORT": "9464"}, "metrics_port", 9464),
    ({"RELAY_METRICS_PORT": "0"}, "metrics_port", 0),
    ({"RELAY_METRICS_PORT": ""}, "metrics_port", None),
])  # fmt: skip
def test_values(env: dict[str, str], field: str, value: object) -> None:
    assert getattr(load_config(env), field) == value


@pytest.mark.parametrize("raw", ["-1", "65536", "http", "9464.0"])
def test_a_bad_metrics_port_is_one_line_naming_it(raw: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"RELAY_METRICS_PORT": raw})
    message = str(err.value)
    assert message.startswith("RELAY_METRICS_PORT=") and "\n" not in message


def test_the_metrics_port_cannot_be_the_relay_port() -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"RELAY_METRICS_PORT": "9000", "RELAY_PORT": "9000"})
    assert str(err.value) == (
        "RELAY_METRICS_PORT=9000: the same port as RELAY_PORT; choose another (or 0: any free port)"
    )
    with pytest.raises(ConfigError, match="the same port as RELAY_PORT"):
        load_config({"RELAY_METRICS_PORT": "8787"})  # RELAY_PORT's default


def test_a_bad_drop_setting_is_one_line_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"^RELAY_DROP_UNSUPPORTED_PARAMS='maybe': expected 1"):
        load_config({"RELAY_DROP_UNSUPPORTED_PARAMS": "maybe"})


def test_token_accounting_defaults() -> None:
    config = load_config({})
    assert config.stats_retention_days == 90
    assert config.token_prices == {}


def test_token_prices_inline_or_from_a_file(tmp_path: Path) -> None:
    inline = '{"gpt-5": {"input": 1.25, "cached_input": 0.125, "output": 10}}'
    config = load_config({"RELAY_TOKEN_PRICES": inline, "RELAY_STATS_RETENTION_DAYS": "0"})
    assert config.token_prices["gpt-5"] == Price(1.25, 0.125, 10.0)
    assert config.stats_retention_days == 0
    path = tmp_path / "prices.json"
    path.write_text(inline, encoding="utf-8")
    assert load_config({"RELAY_TOKEN_PRICES": str(path)}).token_prices == config.token_prices


@pytest.mark.parametrize(("env", "line"), [
    ({"RELAY_STATS_RETENTION_DAYS": "-1"},
     "RELAY_STATS_RETENTION_DAYS='-1': expected a whole number >= 0"),
    ({"RELAY_TOKEN_PRICES": "[1]"},
     "RELAY_TOKEN_PRICES: expected a JSON object mapping model names to prices"),
    ({"RELAY_TOKEN_PRICES": '{"gpt-5": {"input": 1}}'},
     "RELAY_TOKEN_PRICES['gpt-5'].cached_input: expected a price per million tokens (a number >= 0)"),
    ({"RELAY_TOKEN_PRICES": "{oops"}, "RELAY_TOKEN_PRICES: invalid JSON"),
])  # fmt: skip
def test_token_accounting_errors_are_one_line(env: dict[str, str], line: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(env)
    assert str(info.value).startswith(line)
    assert "\n" not in str(info.value)
