"""relay.settings.routing.resolve_model: aliases, <provider>/<model>, and plain names."""

from __future__ import annotations

import pytest

from relay.errors import InvalidRequest
from relay.settings.model_alias import ModelAlias
from relay.settings.routing import resolve_model

ALIASES = {
    "ds": ModelAlias("ds", "deepseek-chat", provider="deepseek"),
    "deepseek/special": ModelAlias("deepseek/special", "gpt-5"),
}
PROVIDERS = ("deepseek", "together")


@pytest.mark.parametrize(
    ("name", "model", "provider"),
    [
        ("deepseek/deepseek-reasoner", "deepseek-reasoner", "deepseek"),
        ("together/moonshotai/Kimi-K2-Instruct", "moonshotai/Kimi-K2-Instruct", "together"),
        ("gpt-5", "gpt-5", "openai"),
        # Only configured provider names split; other slashes are part of the model name.
        ("openai/gpt-5", "openai/gpt-5", "openai"),
        ("meta-llama/Llama-3", "meta-llama/Llama-3", "openai"),
        ("DeepSeek/deepseek-chat", "DeepSeek/deepseek-chat", "openai"),
        ("deepseek/", "deepseek/", "openai"),
        ("deepseek/ ", "deepseek/ ", "openai"),
    ],
)
def test_names(name: str, model: str, provider: str) -> None:
    target = resolve_model(name, ALIASES, PROVIDERS)
    assert (target.name, target.model, target.provider) == (name, model, provider)


def test_an_alias_wins_and_carries_its_provider() -> None:
    assert resolve_model("ds", ALIASES, PROVIDERS) is ALIASES["ds"]
    assert resolve_model("deepseek/special", ALIASES, PROVIDERS).provider == "openai"


def test_without_providers_nothing_splits() -> None:
    assert resolve_model("deepseek/deepseek-chat", {}).provider == "openai"


@pytest.mark.parametrize("name", [None, "", "  ", 3])
def test_missing_model(name: object) -> None:
    with pytest.raises(InvalidRequest, match="'model' is required"):
        resolve_model(name, ALIASES, PROVIDERS)
