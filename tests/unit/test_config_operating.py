"""The operating variables of relay.config (the admin socket, snapshots, /metrics)."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.config import load_config
from relay.errors import ConfigError


def test_off_by_default() -> None:
    config = load_config({})
    assert config.admin_socket is None and config.metrics_port is None
    assert config.admin_snapshot_dir == Path("~/.openai-relay-inspection")


@pytest.mark.parametrize(("env", "field", "value"), [
    ({"RELAY_ADMIN_SOCKET": "/run/relay/admin.sock"}, "admin_socket", Path("/run/relay/admin.sock")),
    ({"RELAY_ADMIN_SOCKET": "  "}, "admin_socket", None),
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
