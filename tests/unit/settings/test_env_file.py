"""relay.settings.env_file: ``--env-file``'s syntax, and flags > environment > env file."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.errors import ConfigError
from relay.settings.config import load_config
from relay.settings.env_file import layered, parse_env_file


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "relay.env"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_syntax(tmp_path: Path) -> None:
    path = write(tmp_path, "\n".join([
        "# a comment",
        "",
        "PLAIN=value",
        "  SPACED = padded value  ",
        "export EXPORTED=1",
        "TRAILING=abc # a comment after the value",
        "HASH=a#b",
        "SINGLE='it is # literal \\\\n'",
        'DOUBLE="say \\"hi\\" \\\\ there" # comment',
        "EMPTY=",
        "EQUALS=a=b",
        "PLAIN=last one wins",
    ]))  # fmt: skip
    found = {key: value for key, (value, _line) in parse_env_file(path).items()}
    assert found == {
        "PLAIN": "last one wins",
        "SPACED": "padded value",
        "EXPORTED": "1",
        "TRAILING": "abc",
        "HASH": "a#b",
        "SINGLE": "it is # literal \\\\n",
        "DOUBLE": 'say "hi" \\ there',
        "EMPTY": "",
        "EQUALS": "a=b",
    }
    assert parse_env_file(path)["PLAIN"][1] == 12


@pytest.mark.parametrize(("text", "says"), [
    ("just words", ":1: expected KEY=VALUE"),
    ("OK=1\n1BAD=x", ":2: expected KEY=VALUE"),
    ("=x", ":1: expected KEY=VALUE"),
    ("A='open", ":1: the value's ' quote is not closed"),
    ('A="x" y', ":1: text after the quoted value"),
])  # fmt: skip
def test_a_bad_line_is_one_error_naming_the_file_and_line(
    tmp_path: Path, text: str, says: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        parse_env_file(path)
    assert str(err.value) == f"{path}{says}" or str(err.value).startswith(f"{path}{says}")
    assert "\n" not in str(err.value)


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--env-file .*nope\.env: cannot read it: No such"):
        parse_env_file(tmp_path / "nope.env")


def test_flags_beat_the_environment_which_beats_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "RELAY_PORT=1111\nRELAY_HOST=10.0.0.1\nRELAY_LOG_LEVEL=debug\n")
    settings = layered(
        {"RELAY_PORT": "2222", "RELAY_HOST": "127.0.0.2"},
        env_file=path,
        flags={"port": "3333", "host": None, "data_dir": str(tmp_path / "d")},
    )
    config = load_config(settings.env)
    assert config.port == 3333  # flag > environment > file
    assert config.host == "127.0.0.2"  # environment > file
    assert config.log_level == "debug"  # the file alone
    assert config.data_dir == tmp_path / "d"


def test_an_error_names_where_the_value_came_from(tmp_path: Path) -> None:
    path = write(tmp_path, "# port\nRELAY_PORT=eighty\nRELAY_LOG_LEVEL=debug\n")
    from_file = layered({}, env_file=path)
    with pytest.raises(ConfigError) as err:
        load_config(from_file.env)
    assert from_file.explain(err.value) == (
        f"{path}:2: RELAY_PORT='eighty': expected a whole number >= 0"
    )
    from_flag = layered({}, env_file=path, flags={"port": "x"})
    with pytest.raises(ConfigError) as err:
        load_config(from_flag.env)
    assert from_flag.explain(err.value) == "--port='x': expected a whole number >= 0 (RELAY_PORT)"
    from_env = layered({"RELAY_PORT": "y"}, env_file=path)
    with pytest.raises(ConfigError) as err:
        load_config(from_env.env)
    assert from_env.explain(err.value) == "RELAY_PORT='y': expected a whole number >= 0"
