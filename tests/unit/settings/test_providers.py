"""RELAY_PROVIDERS parsing (relay.settings.providers) and how aliases name providers (relay.settings.config)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from relay.errors import ConfigError
from relay.settings.config import load_config
from relay.settings.model_alias import ModelAlias
from relay.settings.providers import Provider

DEEPSEEK = {
    "kind": "chat",
    "base_url": "https://api.deepseek.com/",
    "api_key_env": "DEEPSEEK_API_KEY",
    "strict": "auto",
}
ENV = {"DEEPSEEK_API_KEY": "sk-deepseek-secret"}


def config_with(providers: Any, **env: str) -> Any:
    return load_config({"RELAY_PROVIDERS": json.dumps(providers), **ENV, **env})


def test_a_chat_provider() -> None:
    config = config_with({"deepseek": DEEPSEEK})
    provider = config.providers["deepseek"]
    assert provider == Provider(
        "deepseek", "chat", "https://api.deepseek.com", "sk-deepseek-secret", None,
        "DEEPSEEK_API_KEY",
    )  # fmt: skip
    assert provider.url == "https://api.deepseek.com/chat/completions"
    assert provider.strict_setting == "auto"
    assert "sk-deepseek-secret" not in repr(provider)


@pytest.mark.parametrize(("value", "parsed"), [("auto", None), (True, True), (False, False)])
def test_strict_values(value: Any, parsed: bool | None) -> None:
    config = config_with({"deepseek": {**DEEPSEEK, "strict": value}})
    assert config.providers["deepseek"].strict is parsed


def test_strict_defaults_to_auto_and_responses_kind() -> None:
    spec = {"kind": "responses", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "K"}
    config = config_with({"azure": spec}, K="key")
    assert config.providers["azure"].strict is None
    assert config.providers["azure"].url == "http://127.0.0.1:9/v1/responses"


def test_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "providers.json"
    path.write_text(json.dumps({"deepseek": DEEPSEEK}))
    config = load_config({"RELAY_PROVIDERS": str(path), **ENV})
    assert list(config.providers) == ["deepseek"]


def test_unset_means_none() -> None:
    assert load_config({}).providers == {}
    assert load_config({"RELAY_PROVIDERS": " "}).providers == {}


@pytest.mark.parametrize(
    ("providers", "env", "needle"),
    [
        ([1], ENV, "RELAY_PROVIDERS: expected a JSON object"),
        ({"openai": DEEPSEEK}, ENV, "RELAY_PROVIDERS['openai']: the name is taken by the built-in"),
        ({"OpenAI": DEEPSEEK}, ENV, "the name is taken by the built-in"),
        ({"a/b": DEEPSEEK}, ENV, "RELAY_PROVIDERS['a/b']: a provider name uses letters"),
        ({"deepseek": "chat"}, ENV, "RELAY_PROVIDERS['deepseek']: expected an object"),
        ({"deepseek": {**DEEPSEEK, "model": "x"}}, ENV, "unknown key 'model'"),
        (
            {"deepseek": {**DEEPSEEK, "kind": "completions"}},
            ENV,
            ".kind='completions': expected 'chat' or 'responses'",
        ),
        (
            {"deepseek": {**DEEPSEEK, "base_url": "ftp://x"}},
            ENV,
            ".base_url='ftp://x': expected an http(s) URL",
        ),
        (
            {"deepseek": {**DEEPSEEK, "base_url": "https://x/?q=1"}},
            ENV,
            "without query or fragment",
        ),
        ({"deepseek": {**DEEPSEEK, "base_url": None}}, ENV, ".base_url: expected the provider's"),
        (
            {"deepseek": {**DEEPSEEK, "api_key_env": "sk-literal-key"}},
            ENV,
            ".api_key_env: expected the name",
        ),
        (
            {"deepseek": DEEPSEEK},
            {},
            "the environment variable DEEPSEEK_API_KEY is not set or empty",
        ),
        (
            {"deepseek": DEEPSEEK},
            {"DEEPSEEK_API_KEY": "  "},
            "DEEPSEEK_API_KEY is not set or empty",
        ),
        (
            {"deepseek": {**DEEPSEEK, "strict": "yes"}},
            ENV,
            ".strict='yes': expected \"auto\", true or false",
        ),
        ({"deepseek": {**DEEPSEEK, "strict": 1}}, ENV, ".strict=1: expected"),
    ],
)
def test_invalid_providers_are_one_line_errors(
    providers: Any, env: dict[str, str], needle: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config({"RELAY_PROVIDERS": json.dumps(providers), **env})
    assert needle in str(info.value)
    assert "\n" not in str(info.value)
    assert "sk-deepseek-secret" not in str(info.value)


def test_invalid_json_and_unreadable_file() -> None:
    with pytest.raises(ConfigError, match="RELAY_PROVIDERS: invalid JSON"):
        load_config({"RELAY_PROVIDERS": "{oops"})
    with pytest.raises(ConfigError, match=r"cannot read /nonexistent/providers\.json"):
        load_config({"RELAY_PROVIDERS": "/nonexistent/providers.json"})


def test_an_alias_names_a_provider() -> None:
    aliases = {"ds": {"model": "deepseek-reasoner", "provider": "deepseek", "reasoning_effort": "high"},
               "plain": "gpt-5", "explicit": {"model": "gpt-5", "provider": "openai"}}  # fmt: skip
    config = config_with({"deepseek": DEEPSEEK}, RELAY_MODEL_ALIASES=json.dumps(aliases))
    assert config.model_aliases["ds"] == ModelAlias(
        "ds", "deepseek-reasoner", "high", None, "auto", provider="deepseek"
    )
    assert config.model_aliases["plain"].provider == "openai"
    assert config.model_aliases["explicit"].provider == "openai"


def test_an_alias_sets_the_reasoning_context() -> None:
    aliases = {"gpt-5": {"model": "gpt-5.6", "reasoning_context": "all_turns"}}
    config = config_with({}, RELAY_MODEL_ALIASES=json.dumps(aliases))
    assert config.model_aliases["gpt-5"].reasoning_context == "all_turns"


@pytest.mark.parametrize(
    ("alias", "needle"),
    [
        ({"model": "m", "provider": "nowhere"}, "provider='nowhere': expected one of deepseek, openai"),
        ({"model": "m", "provider": ["deepseek"]}, "provider=['deepseek']: expected one of"),
        ({"model": "m", "provider": "deepseek", "reasoning_summary": "auto"},
         "reasoning_summary: applies to Responses upstreams only"),
        ({"model": "m", "provider": "deepseek", "reasoning_context": "all_turns"},
         "reasoning_context: applies to Responses upstreams only"),
    ],
)  # fmt: skip
def test_invalid_alias_providers(alias: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_with({"deepseek": DEEPSEEK}, RELAY_MODEL_ALIASES=json.dumps({"a": alias}))
    assert needle in str(info.value)


@pytest.mark.parametrize(
    ("env", "field", "value"),
    [
        ({}, "reasoning_cache_strict_ttl_seconds", 7200),
        ({}, "reasoning_cache_strict_memory_entries", 2000),
        ({"REASONING_CACHE_STRICT_TTL_SECONDS": "600"}, "reasoning_cache_strict_ttl_seconds", 600),
        (
            {"REASONING_CACHE_STRICT_MEMORY_ENTRIES": "0"},
            "reasoning_cache_strict_memory_entries",
            0,
        ),
    ],
)
def test_strict_cache_settings(env: dict[str, str], field: str, value: int) -> None:
    assert getattr(load_config(env), field) == value


def test_strict_ttl_has_a_floor() -> None:
    with pytest.raises(
        ConfigError, match="REASONING_CACHE_STRICT_TTL_SECONDS='5': expected a whole number >= 60"
    ):
        load_config({"REASONING_CACHE_STRICT_TTL_SECONDS": "5"})
