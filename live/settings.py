"""What one acceptance run uses: mode, models, credentials, budget, output places.

Everything comes from the command line and the environment, read once here. Offline runs
never look at ``OPENAI_API_KEY``, ``OPENAI_BASE_URL`` or a provider key: the relay is
pointed at the harness's own fake upstream with a key only that fake accepts.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_MODEL = "gpt-5-mini"
DEFAULT_ALT_MODEL = "gpt-5-nano"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MAX_REQUESTS = 80
DEFAULT_MAX_TOKENS = 200_000
DEFAULT_RESULTS = Path("live-results")
# Every relay request of a run carries the same output cap (limits are part of the cache
# scope, so a conversation must keep one value); it also bounds what a request can cost.
DEFAULT_MAX_COMPLETION_TOKENS = 2048

DEEPSEEK_BASE_URL = "https://api.deepseek.com"
DEEPSEEK_KEY_ENV = "DEEPSEEK_API_KEY"
DEEPSEEK_MODEL = "deepseek-reasoner"

OFFLINE_KEY = "sk-live-offline-fake-key"  # the only key the offline fake accepts
OFFLINE_PROVIDER_KEY = "sk-live-offline-provider-key"
OFFLINE_PROVIDER_KEY_ENV = "LIVE_OFFLINE_PROVIDER_KEY"


@dataclass(frozen=True)
class StrictProvider:
    """A strict thinking-mode Chat provider to check (``RELAY_PROVIDERS`` entry)."""

    name: str
    base_url: str
    key_env: str  # the variable the relay reads the key from
    key: str
    model: str  # the provider's model name (sent as ``<name>/<model>``)


@dataclass(frozen=True)
class Settings:
    offline: bool
    model: str = DEFAULT_MODEL
    alt_model: str = DEFAULT_ALT_MODEL
    api_key: str = OFFLINE_KEY
    base_url: str = DEFAULT_BASE_URL  # live: the real upstream; offline: replaced by the fake
    max_requests: int = DEFAULT_MAX_REQUESTS
    max_tokens: int = DEFAULT_MAX_TOKENS
    max_completion_tokens: int = DEFAULT_MAX_COMPLETION_TOKENS
    results_dir: Path = DEFAULT_RESULTS
    record_dir: Path | None = None
    shareable: bool = False
    only: tuple[str, ...] = ()
    seed: int = field(default_factory=lambda: secrets.randbelow(2**31))
    # Live: configured from the environment when its key is set; offline: the fake's.
    strict: StrictProvider | None = None
    # Extra variables for every relay the run starts (tests use it to break the relay).
    relay_env: Mapping[str, str] = field(default_factory=dict)

    @property
    def mode(self) -> str:
        return "offline" if self.offline else "live"

    @property
    def request_timeout_s(self) -> float:
        return 30.0 if self.offline else 180.0

    @property
    def idle_timeout_ms(self) -> int:
        return 15_000 if self.offline else 180_000


def live_strict_provider(environ: Mapping[str, str]) -> StrictProvider | None:
    """DeepSeek when ``DEEPSEEK_API_KEY`` is set; ``RELAY_LIVE_STRICT_*`` configure another
    provider (base URL, key variable, model)."""
    key_env = environ.get("RELAY_LIVE_STRICT_KEY_ENV", DEEPSEEK_KEY_ENV)
    key = environ.get(key_env)
    if not key:
        return None
    return StrictProvider(
        name=environ.get("RELAY_LIVE_STRICT_NAME", "deepseek"),
        base_url=environ.get("RELAY_LIVE_STRICT_BASE_URL", DEEPSEEK_BASE_URL),
        key_env=key_env,
        key=key,
        model=environ.get("RELAY_LIVE_STRICT_MODEL", DEEPSEEK_MODEL),
    )


def offline_strict_provider(fake_base_url: str) -> StrictProvider:
    """The fake's strict thinking-mode Chat endpoint, under a key only the fake knows."""
    return StrictProvider(
        name="strictfake",
        base_url=fake_base_url,
        key_env=OFFLINE_PROVIDER_KEY_ENV,
        key=OFFLINE_PROVIDER_KEY,
        model="deepseek-reasoner",
    )
