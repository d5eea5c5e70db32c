"""Environment → one frozen :class:`Config`, validated at startup.

Every variable the relay reads is declared here with its default. An invalid value raises
:class:`~relay.errors.ConfigError` with one line naming the variable and what it accepts;
``relay serve`` prints that line and exits 2.
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from relay.core.disk_policy import DEFAULT_DISK_BYTES, DEFAULT_RESERVE_BYTES, MIN_RESERVE_BYTES
from relay.core.resources import BudgetTooSmall, CacheBudget
from relay.core.token_usage import Price, PriceError, parse_prices
from relay.errors import ConfigError
from relay.settings.custom_calls import CUSTOM_CALL_FORMS, CustomCallForm
from relay.settings.database_url import DatabaseUrl, parse_database_url
from relay.settings.model_alias import ModelAlias
from relay.settings.providers import BUILTIN, Provider, check_base_url, parse_providers
from relay.settings.tunnel_command import TunnelCommand, parse_tunnel_command

EVENT_LOOPS: Final = ("auto", "asyncio", "uvloop")  # RELAY_EVENT_LOOP

DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"
# File descriptors kept out of RELAY_MAX_CONNECTIONS: the store's files, pooled upstream
# connections (16 per origin, and the embedded fake's side of them), the log, the tunnel's
# pipes, the admin and metrics listeners.
RESERVED_FDS = 128
MAX_CONNECTIONS_CEILING = 1024  # the default never exceeds it, however high the fd limit
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
REASONING_SUMMARIES = ("auto", "concise", "detailed", "none")
REASONING_CONTEXTS = ("auto", "all_turns", "current_turn")
SAMPLING_POLICIES = ("auto", "forward", "drop")


@dataclass(frozen=True)
class Config:
    host: str = "127.0.0.1"
    port: int = 8787
    relay_token: str | None = None
    admin_token: str | None = None  # RELAY_ADMIN_TOKEN: the cache API is off without it
    data_dir: Path = Path("data")
    openai_api_key: str | None = None
    openai_base_url: str = DEFAULT_OPENAI_BASE_URL
    model_aliases: Mapping[str, ModelAlias] = field(default_factory=dict)
    providers: Mapping[str, Provider] = field(default_factory=dict)  # without the built-in
    reasoning_cache_enabled: bool = False
    reasoning_cache_path: Path | None = None  # None: <data_dir>/reasoning-cache.sqlite
    reasoning_cache_retention_days: int = 30
    reasoning_cache_cleanup_interval_ms: int = 3_600_000  # retention cleanup runs this often
    reasoning_cache_max_entry_bytes: int = 4 * 1024 * 1024
    reasoning_cache_max_replay_bytes: int = 16 * 1024 * 1024
    reasoning_cache_max_plan_records: int = 256
    reasoning_cache_max_concurrent: int = 10
    reasoning_cache_memory_bytes: int = 128 * 1024 * 1024
    reasoning_cache_strict_ttl_seconds: int = 2 * 3600
    reasoning_cache_strict_memory_entries: int = 2000
    reasoning_cache_disk_bytes: int = DEFAULT_DISK_BYTES  # payload admission stops above it
    reasoning_cache_reserve_bytes: int = DEFAULT_RESERVE_BYTES  # physical reserve (design §6)
    # REASONING_CACHE_URL: the shared PostgreSQL store (None: the SQLite file, as always).
    reasoning_cache_url: DatabaseUrl | None = None
    # REASONING_CACHE_LEASE_MS: how long an instance's lease on the shared store lasts
    # without a heartbeat (the database's clock times it); renewed every third of it.
    reasoning_cache_lease_ms: int = 30_000
    reasoning_summaries_as_content: bool = False
    replay_rejection_resend: bool = True  # RELAY_REPLAY_REJECTION_RESEND
    # RELAY_CUSTOM_TOOL_CALLS: how a custom tool call reaches a Responses-shaped (Cursor)
    # client: "function" (arguments = the raw input; what Cursor bridges send) or "custom"
    custom_tool_calls: CustomCallForm = "function"
    max_request_bytes: int = 64 * 1024 * 1024
    max_response_bytes: int = 64 * 1024 * 1024
    max_sse_event_bytes: int = 8 * 1024 * 1024
    idle_timeout_ms: int = 900_000
    header_timeout_ms: int = 30_000  # RELAY_HEADER_TIMEOUT_MS: a request head's deadline
    # RELAY_MAX_CONNECTIONS; the default depends on this process's fd limit.
    max_connections: int = field(default_factory=lambda: default_max_connections(fd_soft_limit()))
    delivery_timeout_ms: int = 30_000
    sse_keepalive_ms: int = 15_000
    log_level: str = "info"
    tunnel_command: TunnelCommand | None = None  # RELAY_TUNNEL_CMD (relay.tunnel.supervisor)
    # Operating (relay.ops): the admin socket, its inspection snapshots, /metrics on loopback.
    # RELAY_ADMIN_SOCKET: <data_dir>/run/admin.sock unless set ("off": None). A Config built
    # directly (tests) has none.
    admin_socket: Path | None = None
    admin_snapshot_dir: Path = Path("~/.openai-relay-inspection")  # RELAY_ADMIN_SNAPSHOT_DIR
    metrics_port: int | None = None  # RELAY_METRICS_PORT: off unless set (0: any free port)
    log_format: str = "text"  # RELAY_LOG_FORMAT: text or json (relay.observability.log)
    # LOG_BODIES: request/response bodies on disk (relay.observability.body_log)
    log_bodies: bool = False
    log_bodies_dir: Path | None = None  # None: <data_dir>/bodies
    drop_unsupported_params: bool = False  # RELAY_DROP_UNSUPPORTED_PARAMS (relay.translate)
    # Token accounting (relay.ops.token_stats): hourly tallies kept this long (0: none on
    # disk), and RELAY_TOKEN_PRICES per model for an estimated saving.
    stats_retention_days: int = 90
    token_prices: Mapping[str, Price] = field(default_factory=dict)
    event_loop: str = "auto"  # RELAY_EVENT_LOOP: auto, asyncio or uvloop (relay.app.event_loop)

    @property
    def responses_url(self) -> str:
        return self.openai_base_url.rstrip("/") + "/responses"

    @property
    def cache_path(self) -> Path:
        return self.reasoning_cache_path or self.data_dir / "reasoning-cache.sqlite"

    @property
    def bodies_dir(self) -> Path:
        return self.log_bodies_dir or self.data_dir / "bodies"

    @property
    def default_admin_socket(self) -> Path:
        return default_admin_socket(self.data_dir)

    @property
    def cache_budget(self) -> CacheBudget:
        return CacheBudget(
            memory_bytes=self.reasoning_cache_memory_bytes,
            max_entry_bytes=self.reasoning_cache_max_entry_bytes,
            max_replay_bytes=self.reasoning_cache_max_replay_bytes,
            max_concurrent=self.reasoning_cache_max_concurrent,
        )

    @property
    def uses_embedded_fake(self) -> bool:
        """No key: answers come from the in-process fake upstream."""
        return self.openai_api_key is None


def _int(env: Mapping[str, str], name: str, default: int, *, minimum: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip(), 10)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected a whole number >= {minimum}") from None
    if value < minimum:
        raise ConfigError(f"{name}={raw!r}: expected a whole number >= {minimum}")
    return value


def _database_url(env: Mapping[str, str], name: str) -> DatabaseUrl | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    return parse_database_url(name, raw)


def connection_room(fd_limit: int) -> int:
    """How many client connections the soft fd limit (``ulimit -n``; negative: unlimited)
    leaves room for: all but :data:`RESERVED_FDS`, and at least half of a small limit."""
    if fd_limit < 0:
        return 2**31 - 1
    return max(fd_limit // 2, fd_limit - RESERVED_FDS, 1)


def fd_soft_limit() -> int:
    """This process's soft ``RLIMIT_NOFILE`` (-1: unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return -1 if soft == resource.RLIM_INFINITY else soft


def default_max_connections(fd_limit: int) -> int:
    return min(MAX_CONNECTIONS_CEILING, connection_room(fd_limit))


def _max_connections(env: Mapping[str, str], fd_limit: int) -> int:
    room = connection_room(fd_limit)
    value = _int(env, "RELAY_MAX_CONNECTIONS", default_max_connections(fd_limit), minimum=1)
    if value > room:
        raise ConfigError(
            f"RELAY_MAX_CONNECTIONS={value}: the file-descriptor limit (ulimit -n: {fd_limit}) "
            f"leaves room for {room} connections ({RESERVED_FDS} descriptors are kept for the "
            "store, upstream connections and logs); lower it or raise ulimit -n"
        )
    return value


def _path(env: Mapping[str, str], name: str) -> Path | None:
    raw = env.get(name, "").strip()
    return Path(raw) if raw else None


def _absolute(env: Mapping[str, str], name: str) -> Path | None:
    raw = env.get(name, "").strip()
    return absolute_path(raw) if raw else None


def absolute_path(raw: str) -> Path:
    """``~`` expanded and made absolute against the current directory, once, at startup:
    a relative RELAY_DATA_DIR must not mean another place after a ``cd``."""
    return Path(os.path.expanduser(raw)).absolute()  # ".." left to the OS: symlinks differ


def data_dir_of(env: Mapping[str, str]) -> Path:
    """RELAY_DATA_DIR (default ``./data``), absolute."""
    return absolute_path(env.get("RELAY_DATA_DIR", "").strip() or "data")


def default_admin_socket(data_dir: Path) -> Path:
    return data_dir / "run" / "admin.sock"


def admin_socket_of(env: Mapping[str, str], data_dir: Path) -> Path | None:
    """RELAY_ADMIN_SOCKET: a path (absolute), ``off`` (``None``), or unset: the default in
    the data directory, so ``relay status`` finds it from the data directory alone."""
    raw = env.get("RELAY_ADMIN_SOCKET", "").strip()
    if raw.lower() == "off":
        return None
    return absolute_path(raw) if raw else default_admin_socket(data_dir)


def _optional_port(env: Mapping[str, str], name: str) -> int | None:
    """A TCP port, ``None`` when unset (the listener is off)."""
    if env.get(name, "").strip() == "":
        return None
    port = _int(env, name, 0)
    if port > 65535:
        raise ConfigError(f"{name}={port}: expected a TCP port from 0 to 65535")
    return port


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={raw!r}: expected 1 or 0 (also true/false, yes/no, on/off)")


def _base_url(env: Mapping[str, str]) -> str:
    raw = env.get("OPENAI_BASE_URL", "").strip() or DEFAULT_OPENAI_BASE_URL
    return check_base_url("OPENAI_BASE_URL", raw, example=DEFAULT_OPENAI_BASE_URL)


def load_json_or_path(name: str, raw: str) -> Any:
    """A variable holding JSON inline, or the path of a JSON file."""
    text = raw.strip()
    if not text.startswith(("{", "[")):
        path = Path(text).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"{name}: expected inline JSON or a readable JSON file; cannot read {path}: "
                f"{exc.strerror}"
            ) from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{name}: invalid JSON ({exc})") from None
    except RecursionError:
        raise ConfigError(f"{name}: invalid JSON (nested too deeply)") from None


def parse_model_aliases(
    raw: str | None, providers: Mapping[str, Provider] | None = None
) -> dict[str, ModelAlias]:
    """``{"alias": "upstream-model"}`` or ``{"alias": {"model": ..., "reasoning_effort": ...,
    "reasoning_summary": ..., "reasoning_context": ..., "sampling": ..., "provider": ...}}``;
    ``provider`` names one of ``providers`` (default: the built-in)."""
    name = "RELAY_MODEL_ALIASES"
    providers = providers or {}
    if raw is None or raw.strip() == "":
        return {}
    data = load_json_or_path(name, raw)
    if not isinstance(data, dict):
        raise ConfigError(f"{name}: expected a JSON object mapping alias names to models")
    aliases: dict[str, ModelAlias] = {}
    allowed = {"model", "reasoning_effort", "reasoning_summary", "reasoning_context",
               "sampling", "provider"}  # fmt: skip
    for alias, spec in data.items():
        where = f"{name}[{alias!r}]"
        if isinstance(spec, str):
            spec = {"model": spec}  # noqa: PLW2901 - the short form means just the model
        if not isinstance(spec, dict):
            raise ConfigError(f"{where}: expected a model name or an object with 'model'")
        unknown = sorted(set(spec) - allowed)
        if unknown:
            raise ConfigError(f"{where}: unknown key {unknown[0]!r}; accepted: {sorted(allowed)}")
        model = spec.get("model")
        if not isinstance(model, str) or not model.strip():
            raise ConfigError(f"{where}.model: expected a non-empty upstream model name")
        effort = _choice(spec, "reasoning_effort", REASONING_EFFORTS, where)
        summary = _choice(spec, "reasoning_summary", REASONING_SUMMARIES, where)
        context = _choice(spec, "reasoning_context", REASONING_CONTEXTS, where)
        sampling = _choice(spec, "sampling", SAMPLING_POLICIES, where) or "auto"
        provider = spec.get("provider", BUILTIN)
        if not isinstance(provider, str) or (provider != BUILTIN and provider not in providers):
            known = ", ".join(sorted([BUILTIN, *providers]))
            raise ConfigError(f"{where}.provider={provider!r}: expected one of {known}")
        for key, value in (("reasoning_summary", summary), ("reasoning_context", context)):
            if value is not None and provider in providers and providers[provider].kind == "chat":
                raise ConfigError(
                    f"{where}.{key}: applies to Responses upstreams only; "
                    f"{provider!r} is a Chat Completions provider"
                )
        aliases[alias] = ModelAlias(
            alias, model.strip(), effort, summary, sampling, provider=provider,
            reasoning_context=context,
        )  # fmt: skip
    return aliases


def parse_token_prices(raw: str | None) -> dict[str, Price]:
    """``RELAY_TOKEN_PRICES``: inline JSON or a JSON file, ``{"model": {"input": ..,
    "cached_input": .., "output": ..}}`` per million tokens (relay.core.token_usage)."""
    name = "RELAY_TOKEN_PRICES"
    if raw is None or raw.strip() == "":
        return {}
    data = load_json_or_path(name, raw)
    try:
        return parse_prices(data)
    except PriceError as err:  # its message continues the variable's name
        raise ConfigError(f"{name}{err}") from None


def parse_provider_config(env: Mapping[str, str]) -> dict[str, Provider]:
    """``RELAY_PROVIDERS``: inline JSON or a path to a JSON file (see relay.settings.providers)."""
    raw = env.get("RELAY_PROVIDERS")
    if raw is None or raw.strip() == "":
        return {}
    return parse_providers(load_json_or_path("RELAY_PROVIDERS", raw), env)


def _choice(spec: Mapping[str, Any], key: str, allowed: tuple[str, ...], where: str) -> str | None:
    value = spec.get(key)
    if value is None:
        return None
    if value not in allowed:
        raise ConfigError(f"{where}.{key}={value!r}: expected one of {', '.join(allowed)}")
    return str(value)


def load_config(env: Mapping[str, str] | None = None, *, fd_limit: int | None = None) -> Config:
    """``fd_limit``: the soft fd limit RELAY_MAX_CONNECTIONS is checked against (default:
    this process's)."""
    env = os.environ if env is None else env
    fd_limit = fd_soft_limit() if fd_limit is None else fd_limit
    host = env.get("RELAY_HOST", "").strip() or "127.0.0.1"
    token = env.get("RELAY_TOKEN") or None
    if token is not None and (len(token) < 16 or any(c.isspace() for c in token)):
        raise ConfigError("RELAY_TOKEN: expected at least 16 characters with no whitespace")
    admin = env.get("RELAY_ADMIN_TOKEN") or None
    if admin is not None and (len(admin) < 16 or any(c.isspace() for c in admin)):
        raise ConfigError("RELAY_ADMIN_TOKEN: expected at least 16 characters with no whitespace")
    if admin is not None and admin == token:
        raise ConfigError("RELAY_ADMIN_TOKEN must differ from RELAY_TOKEN")
    key = env.get("OPENAI_API_KEY", "").strip() or None
    log_level = env.get("RELAY_LOG_LEVEL", "").strip().lower() or "info"
    if log_level not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"RELAY_LOG_LEVEL={log_level!r}: expected debug, info, warning or error")
    log_format = env.get("RELAY_LOG_FORMAT", "").strip().lower() or "text"
    if log_format not in ("text", "json"):
        raise ConfigError(f"RELAY_LOG_FORMAT={log_format!r}: expected text or json")
    event_loop = env.get("RELAY_EVENT_LOOP", "").strip().lower() or "auto"
    if event_loop not in EVENT_LOOPS:
        raise ConfigError(f"RELAY_EVENT_LOOP={event_loop!r}: expected auto, asyncio or uvloop")
    if event_loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
        raise ConfigError(
            "RELAY_EVENT_LOOP=uvloop but uvloop is not installed; "
            "install it (pip install 'reasoning-replay-relay[fast]') or set auto"
        )
    providers = parse_provider_config(env)
    data_dir = data_dir_of(env)
    custom_calls = env.get("RELAY_CUSTOM_TOOL_CALLS", "").strip().lower() or "function"
    if custom_calls not in CUSTOM_CALL_FORMS:
        raise ConfigError(f"RELAY_CUSTOM_TOOL_CALLS={custom_calls!r}: expected function or custom")
    config = Config(
        host=host,
        port=_int(env, "RELAY_PORT", 8787, minimum=0),
        relay_token=token,
        admin_token=admin,
        data_dir=data_dir,
        openai_api_key=key,
        openai_base_url=_base_url(env),
        model_aliases=parse_model_aliases(env.get("RELAY_MODEL_ALIASES"), providers),
        providers=providers,
        reasoning_cache_enabled=_bool(env, "REASONING_CACHE_ENABLED", False),
        reasoning_cache_path=_absolute(env, "REASONING_CACHE_PATH"),
        reasoning_cache_retention_days=_int(env, "REASONING_CACHE_RETENTION_DAYS", 30, minimum=30),
        reasoning_cache_cleanup_interval_ms=_int(
            env, "REASONING_CACHE_CLEANUP_INTERVAL_MS", 3_600_000, minimum=100
        ),
        reasoning_cache_max_entry_bytes=_int(
            env, "REASONING_CACHE_MAX_ENTRY_BYTES", 4 * 1024 * 1024, minimum=64 * 1024
        ),
        reasoning_cache_max_replay_bytes=_int(
            env, "REASONING_CACHE_MAX_REPLAY_BYTES", 16 * 1024 * 1024, minimum=64 * 1024
        ),
        reasoning_cache_max_plan_records=_int(
            env, "REASONING_CACHE_MAX_PLAN_RECORDS", 256, minimum=1
        ),
        reasoning_cache_max_concurrent=_int(env, "REASONING_CACHE_MAX_CONCURRENT", 10, minimum=0),
        reasoning_cache_memory_bytes=_int(
            env, "REASONING_CACHE_MEMORY_BYTES", 128 * 1024 * 1024, minimum=1024 * 1024
        ),
        reasoning_cache_strict_ttl_seconds=_int(
            env, "REASONING_CACHE_STRICT_TTL_SECONDS", 2 * 3600, minimum=60
        ),
        reasoning_cache_strict_memory_entries=_int(
            env, "REASONING_CACHE_STRICT_MEMORY_ENTRIES", 2000, minimum=0
        ),
        reasoning_cache_disk_bytes=_int(
            env, "REASONING_CACHE_DISK_BYTES", DEFAULT_DISK_BYTES, minimum=MIN_RESERVE_BYTES
        ),
        reasoning_cache_reserve_bytes=_int(
            env, "REASONING_CACHE_RESERVE_BYTES", DEFAULT_RESERVE_BYTES, minimum=MIN_RESERVE_BYTES
        ),
        reasoning_cache_url=_database_url(env, "REASONING_CACHE_URL"),
        reasoning_cache_lease_ms=_int(env, "REASONING_CACHE_LEASE_MS", 30_000, minimum=300),
        reasoning_summaries_as_content=_bool(env, "RELAY_REASONING_SUMMARIES", False),
        replay_rejection_resend=_bool(env, "RELAY_REPLAY_REJECTION_RESEND", True),
        custom_tool_calls="custom" if custom_calls == "custom" else "function",
        max_request_bytes=_int(env, "RELAY_MAX_REQUEST_BYTES", 64 * 1024 * 1024, minimum=1024),
        max_response_bytes=_int(env, "RELAY_MAX_RESPONSE_BYTES", 64 * 1024 * 1024, minimum=1024),
        max_sse_event_bytes=_int(env, "RELAY_MAX_SSE_EVENT_BYTES", 8 * 1024 * 1024, minimum=1024),
        idle_timeout_ms=_int(env, "RELAY_IDLE_TIMEOUT_MS", 900_000, minimum=1),
        header_timeout_ms=_int(env, "RELAY_HEADER_TIMEOUT_MS", 30_000, minimum=1),
        max_connections=_max_connections(env, fd_limit),
        delivery_timeout_ms=_int(env, "RELAY_DELIVERY_TIMEOUT_MS", 30_000, minimum=1),
        sse_keepalive_ms=_int(env, "RELAY_SSE_KEEPALIVE_MS", 15_000, minimum=0),
        log_level=log_level,
        tunnel_command=parse_tunnel_command(env.get("RELAY_TUNNEL_CMD"), env.get("PATH")),
        admin_socket=admin_socket_of(env, data_dir),
        admin_snapshot_dir=_path(env, "RELAY_ADMIN_SNAPSHOT_DIR")
        or Path("~/.openai-relay-inspection"),
        metrics_port=_optional_port(env, "RELAY_METRICS_PORT"),
        log_format=log_format,
        log_bodies=_bool(env, "LOG_BODIES", False),
        log_bodies_dir=_path(env, "RELAY_LOG_BODIES_DIR"),
        drop_unsupported_params=_bool(env, "RELAY_DROP_UNSUPPORTED_PARAMS", False),
        stats_retention_days=_int(env, "RELAY_STATS_RETENTION_DAYS", 90, minimum=0),
        token_prices=parse_token_prices(env.get("RELAY_TOKEN_PRICES")),
        event_loop=event_loop,
    )
    if config.reasoning_cache_enabled:
        try:
            config.cache_budget.check()
        except BudgetTooSmall as err:
            raise ConfigError(str(err)) from None
    if config.port > 65535:
        raise ConfigError(f"RELAY_PORT={config.port}: expected a TCP port from 0 to 65535")
    if config.metrics_port and config.metrics_port == config.port:
        raise ConfigError(
            f"RELAY_METRICS_PORT={config.metrics_port}: the same port as RELAY_PORT; "
            "choose another (or 0: any free port)"
        )
    return config
