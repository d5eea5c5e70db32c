from __future__ import annotations

import json
from pathlib import Path

import pytest

from relay.errors import ConfigError
from relay.settings.config import Config, connection_room, default_max_connections, load_config
from relay.settings.model_alias import ModelAlias


def test_defaults() -> None:
    config = load_config({})
    # The paths are made absolute at startup; the admin socket is on, in the data dir.
    data = Path.cwd() / "data"
    assert config == Config(data_dir=data, admin_socket=data / "run" / "admin.sock")
    assert config.host == "127.0.0.1"
    assert config.responses_url == "https://api.openai.com/v1/responses"
    assert config.uses_embedded_fake
    assert config.max_request_bytes == 64 * 1024 * 1024
    assert config.max_sse_event_bytes == 8 * 1024 * 1024
    assert config.idle_timeout_ms == 900_000
    assert config.delivery_timeout_ms == 30_000
    assert config.sse_keepalive_ms == 15_000
    assert config.reasoning_cache_enabled is False
    assert config.replay_rejection_resend is True
    assert load_config({"RELAY_REPLAY_REJECTION_RESEND": "0"}).replay_rejection_resend is False


def test_base_url_follows_sdk_convention() -> None:
    config = load_config({"OPENAI_BASE_URL": "http://127.0.0.1:9/v1/", "OPENAI_API_KEY": "k"})
    assert config.responses_url == "http://127.0.0.1:9/v1/responses"
    assert not config.uses_embedded_fake


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"RELAY_PORT": "eighty"}, "RELAY_PORT='eighty': expected a whole number"),
        ({"RELAY_PORT": "70000"}, "RELAY_PORT=70000: expected a TCP port"),
        ({"RELAY_IDLE_TIMEOUT_MS": "0"}, "RELAY_IDLE_TIMEOUT_MS='0': expected a whole number >= 1"),
        ({"RELAY_HEADER_TIMEOUT_MS": "0"}, "RELAY_HEADER_TIMEOUT_MS='0': expected a whole number"),
        ({"RELAY_MAX_CONNECTIONS": "0"}, "RELAY_MAX_CONNECTIONS='0': expected a whole number >= 1"),
        ({"REASONING_CACHE_ENABLED": "maybe"}, "REASONING_CACHE_ENABLED='maybe': expected 1 or 0"),
        ({"OPENAI_BASE_URL": "ftp://x"}, "OPENAI_BASE_URL='ftp://x': expected an http(s) URL"),
        ({"RELAY_TOKEN": "short"}, "RELAY_TOKEN: expected at least 16 characters"),
        ({"RELAY_MODEL_ALIASES": "[1]"}, "RELAY_MODEL_ALIASES: expected a JSON object"),
        ({"RELAY_MODEL_ALIASES": "{bad"}, "RELAY_MODEL_ALIASES: invalid JSON"),
        ({"RELAY_MODEL_ALIASES": "[" * 5000}, "RELAY_MODEL_ALIASES: invalid JSON (nested too"),
        ({"RELAY_MODEL_ALIASES": '{"a": {"model": "m", "effort": "x"}}'}, "unknown key 'effort'"),
        (
            {"RELAY_MODEL_ALIASES": '{"a": {"model": "m", "reasoning_effort": "huge"}}'},
            "reasoning_effort='huge': expected one of",
        ),
        (
            {"RELAY_MODEL_ALIASES": '{"a": {"model": "m", "reasoning_context": "all"}}'},
            "RELAY_MODEL_ALIASES['a'].reasoning_context='all': expected one of auto, "
            "all_turns, current_turn",
        ),
        (
            {"RELAY_MODEL_ALIASES": "/nonexistent/aliases.json"},
            "cannot read /nonexistent/aliases.json",
        ),
        ({"RELAY_LOG_LEVEL": "loud"}, "RELAY_LOG_LEVEL='loud'"),
        ({"RELAY_LOG_FORMAT": "yaml"}, "RELAY_LOG_FORMAT='yaml': expected text or json"),
        ({"LOG_BODIES": "maybe"}, "LOG_BODIES='maybe': expected 1 or 0"),
        ({"RELAY_EVENT_LOOP": "trio"}, "RELAY_EVENT_LOOP='trio': expected auto, asyncio or"),
        ({"RELAY_REPLAY_REJECTION_RESEND": "2"}, "RELAY_REPLAY_REJECTION_RESEND='2': expected 1"),
        (
            {"RELAY_CUSTOM_TOOL_CALLS": "native"},
            "RELAY_CUSTOM_TOOL_CALLS='native': expected function or custom",
        ),
    ],
)
def test_invalid_values_name_the_variable(env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(env)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_aliases_inline_and_from_file(tmp_path: Path) -> None:
    spec = {
        "gpt-high": {"model": "gpt-5", "reasoning_effort": "high", "sampling": "drop"},
        "fast": "gpt-5-mini",
    }
    inline = load_config({"RELAY_MODEL_ALIASES": json.dumps(spec)})
    path = tmp_path / "aliases.json"
    path.write_text(json.dumps(spec))
    from_file = load_config({"RELAY_MODEL_ALIASES": str(path)})
    assert (
        inline.model_aliases
        == from_file.model_aliases
        == {
            "gpt-high": ModelAlias("gpt-high", "gpt-5", "high", None, "drop"),
            "fast": ModelAlias("fast", "gpt-5-mini"),
        }
    )


@pytest.mark.parametrize(
    ("value", "form"), [(None, "function"), ("function", "function"), (" Custom ", "custom")]
)
def test_custom_tool_call_form(value: str | None, form: str) -> None:
    env = {} if value is None else {"RELAY_CUSTOM_TOOL_CALLS": value}
    assert load_config(env).custom_tool_calls == form


def test_log_format_and_body_log_settings(tmp_path: Path) -> None:
    default = load_config({"RELAY_DATA_DIR": str(tmp_path)})
    assert (default.log_format, default.log_bodies) == ("text", False)
    assert default.bodies_dir == tmp_path / "bodies"
    chosen = load_config(
        {"RELAY_LOG_FORMAT": " JSON ", "LOG_BODIES": "1", "RELAY_LOG_BODIES_DIR": "/x/b"}
    )
    assert (chosen.log_format, chosen.log_bodies, chosen.bodies_dir) == ("json", True, Path("/x/b"))


@pytest.mark.parametrize(("value", "loop"), [(None, "auto"), (" AsyncIO ", "asyncio")])
def test_event_loop_setting(value: str | None, loop: str) -> None:
    env = {} if value is None else {"RELAY_EVENT_LOOP": value}
    assert load_config(env).event_loop == loop


def test_event_loop_uvloop_needs_uvloop_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "uvloop" else real(name, *a)
    )
    with pytest.raises(ConfigError, match=r"^RELAY_EVENT_LOOP=uvloop but uvloop is not installed"):
        load_config({"RELAY_EVENT_LOOP": "uvloop"})


def test_disk_pressure_settings() -> None:
    from relay.core.disk_policy import DEFAULT_DISK_BYTES, DEFAULT_RESERVE_BYTES

    config = load_config({})
    assert config.reasoning_cache_disk_bytes == DEFAULT_DISK_BYTES == 1 << 30
    assert config.reasoning_cache_reserve_bytes == DEFAULT_RESERVE_BYTES == 64 << 20
    config = load_config({"REASONING_CACHE_RESERVE_BYTES": "65536",
                          "REASONING_CACHE_DISK_BYTES": "1048576"})  # fmt: skip
    assert (config.reasoning_cache_reserve_bytes, config.reasoning_cache_disk_bytes) == (
        65536,
        1 << 20,
    )
    for name in ("REASONING_CACHE_RESERVE_BYTES", "REASONING_CACHE_DISK_BYTES"):
        with pytest.raises(
            ConfigError, match=f"^{name}='65535': expected a whole number >= 65536$"
        ):
            load_config({name: "65535"})


@pytest.mark.parametrize(
    ("fd_limit", "room", "default"),
    [
        (20_000, 19_872, 1024),  # the default never exceeds 1024
        (1024, 896, 896),  # 128 descriptors kept for the store, upstreams and logs
        (256, 128, 128),
        (100, 50, 50),  # a small limit: half of it
        (1, 1, 1),
        (-1, 2**31 - 1, 1024),  # unlimited
    ],
)
def test_the_connection_cap_follows_the_fd_limit(fd_limit: int, room: int, default: int) -> None:
    assert connection_room(fd_limit) == room
    assert default_max_connections(fd_limit) == default
    assert load_config({}, fd_limit=fd_limit).max_connections == default
    assert (
        load_config({"RELAY_MAX_CONNECTIONS": str(room)}, fd_limit=fd_limit).max_connections == room
    )


def test_a_connection_cap_beyond_the_fd_limit_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        load_config({"RELAY_MAX_CONNECTIONS": "897"}, fd_limit=1024)
    assert str(info.value) == (
        "RELAY_MAX_CONNECTIONS=897: the file-descriptor limit (ulimit -n: 1024) leaves room "
        "for 896 connections (128 descriptors are kept for the store, upstream connections "
        "and logs); lower it or raise ulimit -n"
    )


def test_the_header_deadline() -> None:
    assert load_config({}).header_timeout_ms == 30_000
    assert load_config({"RELAY_HEADER_TIMEOUT_MS": "250"}).header_timeout_ms == 250
