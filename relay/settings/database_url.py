"""``REASONING_CACHE_URL``: the shared PostgreSQL store's libpq connection string.

A ``postgresql://`` URL or a ``key=value`` string, parsed by libpq itself (through
psycopg), so everything libpq allows works, ``PGPASSFILE``/``PGPASSWORD`` and the other
``PG*`` variables included. The string may hold a password: it is never printed. Every
message and log names the database by :func:`describe`, which keeps only user, host, port
and database name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from relay.errors import ConfigError

_SCHEMES = ("postgresql://", "postgres://")


@dataclass(frozen=True)
class DatabaseUrl:
    """A validated connection string and its printable description."""

    conninfo: str = field(repr=False)  # may hold a password: never printed
    description: str

    def __str__(self) -> str:
        return self.description


def describe(params: dict[str, str]) -> str:
    """``postgresql://user@host:port/dbname`` without a password (libpq defaults left
    out; a Unix socket directory is shown as the host, as libpq names it)."""
    user = params.get("user")
    host = params.get("host") or params.get("hostaddr") or ""
    port = params.get("port")
    dbname = params.get("dbname") or ""
    where = f"{user}@" if user else ""
    where += host if "/" not in host else f"[{host}]"
    where += f":{port}" if port else ""
    return f"postgresql://{where}/{dbname}"


def parse_database_url(name: str, raw: str) -> DatabaseUrl:
    """Validate ``raw`` with libpq's own parser; a :class:`ConfigError` naming ``name``
    and never echoing the value (it may hold a password)."""
    from psycopg import ProgrammingError  # noqa: PLC0415 - only a team deployment pays for it
    from psycopg.conninfo import conninfo_to_dict  # noqa: PLC0415

    text = raw.strip()
    looks_like_url = text.startswith(_SCHEMES)
    if not looks_like_url and "=" not in text:
        raise ConfigError(
            f"{name}: expected a postgresql:// URL or a libpq key=value connection string"
        )
    try:
        params = {k: str(v) for k, v in conninfo_to_dict(text).items() if v is not None}
    except ProgrammingError:
        raise ConfigError(
            f"{name}: libpq cannot parse it; expected a postgresql:// URL or key=value pairs "
            "(the value is not shown: it may hold a password)"
        ) from None
    ports = params.get("port", "").split(",")
    if any(port and not (port.isdigit() and 0 < int(port) < 65536) for port in ports):
        raise ConfigError(f"{name}: the port must be a TCP port from 1 to 65535")
    return DatabaseUrl(text, describe(params))
