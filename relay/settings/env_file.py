"""Where ``relay serve``'s settings come from: ``--env-file FILE``, the environment and the
flags (``--data-dir``, ``--host``, ``--port``), layered into one mapping that
:func:`relay.settings.config.load_config` validates as it validates the environment.

Precedence: a flag beats the environment, which beats the env file (an exported variable
is the deliberate, per-run choice; the file is the standing default). Pure apart from
reading the file.

The file holds ``KEY=VALUE`` lines: blank lines and ``#`` comments are skipped, an
``export`` prefix is allowed, a value may be quoted (``'...'`` is taken literally,
``"..."`` understands ``\\"`` and ``\\\\``), and an unquoted value ends at `` #``. Anything
else is refused with the file and line.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from relay.errors import ConfigError

# flag (argparse dest) -> the variable it sets
FLAG_VARIABLES: Final = {
    "data_dir": ("--data-dir", "RELAY_DATA_DIR"),
    "host": ("--host", "RELAY_HOST"),
    "port": ("--port", "RELAY_PORT"),
}
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOUBLE_ESCAPE = re.compile(r"\\([\"\\])")


@dataclass(frozen=True)
class Settings:
    """The layered variables and, for those not from the environment, where each came
    from (a flag's name, or ``FILE:LINE``): a configuration error then names that."""

    env: Mapping[str, str]
    origins: Mapping[str, str] = field(default_factory=dict)

    def explain(self, err: ConfigError) -> str:
        """``err``'s line, naming the flag or the file line its variable came from."""
        message = str(err)
        for variable, source in self.origins.items():  # "... (RELAY_DATA_DIR) ..." inside
            if source.startswith("--") and f"({variable})" in message:
                return message.replace(f"({variable})", f"({source}, {variable})")
        name = _KEY.match(message)
        origin = self.origins.get(name.group(0)) if name else None
        if name is None or origin is None:
            return message
        if origin.startswith("--"):
            return origin + message[name.end() :] + f" ({name.group(0)})"
        return f"{origin}: {message}"


def add_env_file_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--env-file",
        type=Path,
        metavar="FILE",
        help="KEY=VALUE lines read as if exported (the environment wins over them)",
    )


def parse_env_file(path: Path) -> dict[str, tuple[str, int]]:
    """``{KEY: (value, line number)}``; the last of a repeated key wins. Raises
    :class:`ConfigError` naming the file (and line)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ConfigError(f"--env-file {path}: cannot read it: {reason}") from None
    found: dict[str, tuple[str, int]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, equals, value = line.partition("=")
        key = key.strip()
        if not equals or not _KEY.fullmatch(key):
            raise ConfigError(f"{path}:{number}: expected KEY=VALUE (or a # comment)")
        found[key] = (_value(value.strip(), f"{path}:{number}"), number)
    return found


def _value(raw: str, where: str) -> str:
    if raw[:1] in ("'", '"'):
        quote = raw[0]
        end = _closing(raw, quote)
        if end is None:
            raise ConfigError(f"{where}: the value's {quote} quote is not closed")
        rest = raw[end + 1 :].strip()
        if rest and not rest.startswith("#"):
            raise ConfigError(f"{where}: text after the quoted value; quote all of it")
        inner = raw[1:end]
        return _DOUBLE_ESCAPE.sub(r"\1", inner) if quote == '"' else inner
    comment = raw.find(" #")
    return (raw[:comment] if comment >= 0 else raw).strip()


def _closing(raw: str, quote: str) -> int | None:
    index = 1
    while index < len(raw):
        if quote == '"' and raw[index] == "\\":
            index += 2
            continue
        if raw[index] == quote:
            return index
        index += 1
    return None


def layered(
    environ: Mapping[str, str],
    *,
    env_file: Path | None = None,
    flags: Mapping[str, str | None] | None = None,
) -> Settings:
    """Flags over ``environ`` over the env file; ``flags`` by argparse dest (unset: None)."""
    env: dict[str, str] = {}
    origins: dict[str, str] = {}
    if env_file is not None:
        for key, (value, number) in parse_env_file(env_file).items():
            env[key] = value
            origins[key] = f"{env_file}:{number}"
    for key, value in environ.items():
        env[key] = value
        origins.pop(key, None)
    for dest, given in (flags or {}).items():
        if given is not None:
            flag, variable = FLAG_VARIABLES[dest]
            env[variable] = given
            origins[variable] = flag
    return Settings(env, origins)
