"""Upstream providers: where a model call goes, how it is spoken, and with which key.

The built-in provider ``openai`` is the Responses upstream (``OPENAI_BASE_URL``,
``OPENAI_API_KEY``, or the embedded fake). ``RELAY_PROVIDERS`` adds more, each an object::

    {"deepseek": {"kind": "chat", "base_url": "https://api.deepseek.com",
                  "api_key_env": "DEEPSEEK_API_KEY", "strict": "auto"}}

- ``kind``: ``"chat"`` (Chat Completions, called at ``{base_url}/chat/completions`` as the
  openai SDK does) or ``"responses"`` (``{base_url}/responses``, translated like ``openai``).
- ``api_key_env``: the environment variable holding the provider's key; the key itself never
  appears in the JSON, so the JSON can live in a file that is safe to share.
- ``strict``: ``"auto"`` (the rule tables in :mod:`relay.strict.rules` decide), ``true``
  (always restore ``reasoning_content``) or ``false`` (never; any sent is stripped).

:func:`parse_providers` validates the parsed JSON; each problem is one
:class:`~relay.errors.ConfigError` line naming the provider and the key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from relay.errors import ConfigError

BUILTIN: Final = "openai"
KINDS: Final = ("responses", "chat")
ENDPOINTS: Final = {"responses": "/responses", "chat": "/chat/completions"}
VARIABLE: Final = "RELAY_PROVIDERS"
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")  # no "/": it splits model names
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_KEYS: Final = frozenset({"kind", "base_url", "api_key_env", "strict"})

Kind = Literal["responses", "chat"]


@dataclass(frozen=True)
class Provider:
    """One upstream. ``strict`` is ``None`` for ``"auto"``."""

    name: str
    kind: Kind
    base_url: str  # without a trailing slash
    api_key: str = field(repr=False)
    strict: bool | None = None
    api_key_env: str | None = None  # where the key came from, for messages

    @property
    def url(self) -> str:
        """The endpoint a model call is posted to."""
        return self.base_url + ENDPOINTS[self.kind]

    @property
    def strict_setting(self) -> str:
        return "auto" if self.strict is None else str(self.strict).lower()


def check_base_url(where: str, raw: str, *, example: str = "https://api.example.com/v1") -> str:
    """An http(s) URL without query or fragment, trailing slashes removed."""
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{where}={raw!r}: expected an http(s) URL such as {example}")
    if parts.query or parts.fragment:
        raise ConfigError(f"{where}={raw!r}: expected a URL without query or fragment")
    return raw.rstrip("/")


def parse_providers(data: Any, env: Mapping[str, str]) -> dict[str, Provider]:
    """The providers of an already-parsed ``RELAY_PROVIDERS`` value."""
    if not isinstance(data, dict):
        raise ConfigError(f"{VARIABLE}: expected a JSON object mapping provider names to objects")
    return {name: _provider(name, spec, env) for name, spec in data.items()}


def _provider(name: str, spec: Any, env: Mapping[str, str]) -> Provider:
    where = f"{VARIABLE}[{name!r}]"
    if not _NAME.match(name):
        raise ConfigError(
            f"{where}: a provider name uses letters, digits, '.', '_' and '-' (no '/'), "
            "starting with a letter or digit"
        )
    if name.lower() == BUILTIN:
        raise ConfigError(
            f"{where}: the name is taken by the built-in OpenAI upstream (OPENAI_BASE_URL); "
            "choose another name"
        )
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: expected an object with kind, base_url and api_key_env")
    unknown = sorted(set(spec) - _KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; accepted: {sorted(_KEYS)}")
    kind = spec.get("kind")
    if kind not in KINDS:
        raise ConfigError(f"{where}.kind={kind!r}: expected 'chat' or 'responses'")
    base_url = spec.get("base_url")
    if not isinstance(base_url, str):
        raise ConfigError(f"{where}.base_url: expected the provider's http(s) base URL")
    variable = spec.get("api_key_env")
    if not isinstance(variable, str) or not _ENV_NAME.match(variable):
        raise ConfigError(
            f"{where}.api_key_env: expected the name of the environment variable holding "
            "the provider's key, e.g. DEEPSEEK_API_KEY"
        )
    key = env.get(variable, "").strip()
    if not key:
        raise ConfigError(
            f"{where}.api_key_env: the environment variable {variable} is not set or empty; "
            "export the provider's API key in it"
        )
    return Provider(
        name=name,
        kind=kind,
        base_url=check_base_url(f"{where}.base_url", base_url),
        api_key=key,
        strict=_strict(where, spec.get("strict", "auto")),
        api_key_env=variable,
    )


def _strict(where: str, value: Any) -> bool | None:
    if value == "auto":
        return None
    if isinstance(value, bool):
        return value
    raise ConfigError(f'{where}.strict={value!r}: expected "auto", true or false')
