"""``RELAY_TUNNEL_CMD``: the tunnel program's command line, checked once at startup.

The value is split like a POSIX shell would split it (:func:`shlex.split`: quotes and
backslashes work, but nothing is expanded and no shell runs it). ``{port}`` anywhere in an
argument becomes the port the relay actually bound, which with ``RELAY_PORT=0`` is only
known after listening; any other ``{name}`` is refused so that a typo such as ``{prot}``
fails at startup instead of reaching the tunnel program. Braces that do not enclose a bare
name (a JSON argument, say) are left alone.
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass

from relay.errors import ConfigError

NAME = "RELAY_TUNNEL_CMD"
PLACEHOLDER = "{port}"
_PLACEHOLDERS = re.compile(r"\{(\w*)\}")


@dataclass(frozen=True)
class TunnelCommand:
    """The split command line, ``{port}`` still in place."""

    template: tuple[str, ...]

    @property
    def program(self) -> str:
        """The program's name for messages (its path's last part: no directories)."""
        return self.template[0].rsplit("/", 1)[-1]

    def argv(self, port: int) -> list[str]:
        return [part.replace(PLACEHOLDER, str(port)) for part in self.template]


def parse_tunnel_command(raw: str | None, search_path: str | None = None) -> TunnelCommand | None:
    """Unset or blank: no tunnel. ``search_path`` is the PATH the program is looked up on."""
    if raw is None or raw.strip() == "":
        return None
    try:
        parts = shlex.split(raw)
    except ValueError as exc:  # an unterminated quote or a trailing backslash
        raise ConfigError(f"{NAME}: cannot split the command line ({exc})") from None
    for part in parts:
        for match in _PLACEHOLDERS.finditer(part):
            if match.group(0) != PLACEHOLDER:
                raise ConfigError(
                    f"{NAME}: unknown placeholder {match.group(0)}; only {PLACEHOLDER} "
                    "(the relay's listening port) is substituted"
                )
    if "=" in parts[0]:  # not echoed: ``NGROK_AUTHTOKEN=... ngrok`` would print the token
        raise ConfigError(
            f"{NAME}: starts with a variable assignment; no shell runs the command, so set "
            "the variable in the relay's own environment instead"
        )
    if PLACEHOLDER in parts[0]:
        raise ConfigError(f"{NAME}: {PLACEHOLDER} cannot be part of the program name")
    if shutil.which(parts[0], path=search_path) is None:
        raise ConfigError(
            f"{NAME}: program {parts[0]!r} not found or not executable"
            + ("" if "/" in parts[0] else " on PATH")
            + "; install it or give its full path"
        )
    return TunnelCommand(tuple(parts))
