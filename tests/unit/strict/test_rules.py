"""relay.strict.rules: one table-driven case per row, then how rows combine."""

from __future__ import annotations

import pytest

from relay.strict.rules import (
    FORCED,
    MODEL_RULES,
    PROVIDER_RULES,
    ModelPattern,
    OnMiss,
    ProviderName,
    StrictRule,
    Turns,
    rule_for,
    strictness,
)

TOOLS, ALL, REJECTS = Turns.TOOL_CALLS, Turns.ALL_WITH_TOOLS, Turns.REJECTS
EMPTY, ABSENT = OnMiss.EMPTY, OnMiss.ABSENT

# pattern -> (models it must match, models it must not match, turns, on_miss)
MODEL_CASES: dict[str, tuple[list[str], list[str], Turns, OnMiss]] = {
    r"deepseek-reasoner": (["deepseek-reasoner", "DeepSeek-Reasoner"], ["deepseek-r1"], REJECTS, ABSENT),
    r"deepseek-r1": (["deepseek-r1", "deepseek-ai/DeepSeek-R1-0528"], ["deepseek-reasoner"], TOOLS, EMPTY),
    r"deepseek-chat": (["deepseek-chat", "DEEPSEEK-CHAT"], ["deepseek-coder"], TOOLS, EMPTY),
    r"deepseek[-/]?v4[-.](?:flash|pro)(?:-free)?": (
        ["deepseekv4.flash", "deepseek/v4-pro", "deepseekv4-pro-free"], ["deepseek-v3-pro"], TOOLS, EMPTY,
    ),
    r"(?:deepseek|zen/deepseek)-v4": (["deepseek-v4", "zen/deepseek-v4-exp"], ["deepseek_v4"], TOOLS, EMPTY),
    r"kimi-k2": (["kimi-k2-thinking", "moonshotai/Kimi-K2-Instruct"], ["kimi-latest"], TOOLS, ABSENT),
    r"qwq": (["qwq-32b", "Qwen/QwQ-32B"], ["qwen-max"], TOOLS, ABSENT),
    r"qwen.*think": (["qwen3-235b-a22b-thinking-2507", "Qwen-Think"], ["qwen3-coder"], TOOLS, ABSENT),
    r"glm.*think": (["glm-4.1v-thinking", "GLM-Z1-Thinking"], ["glm-4.5"], TOOLS, ABSENT),
    r"^mimo[-.]?v\d": (["mimo-v2-flash", "MiMo.V2", "mimov2"], ["xiaomi/mimo-v2", "mimo-vl"], TOOLS, ABSENT),
}  # fmt: skip

PROVIDER_CASES: dict[str, tuple[Turns, OnMiss]] = {
    "deepseek": (TOOLS, EMPTY),
    "opencode-go": (ALL, ABSENT),
    "siliconflow": (ALL, ABSENT),
    "nebius": (ALL, ABSENT),
    "deepinfra": (ALL, ABSENT),
    "sambanova": (ALL, ABSENT),
    "fireworks": (ALL, ABSENT),
    "together": (ALL, ABSENT),
    "xiaomi-mimo": (TOOLS, ABSENT),
}


def test_every_row_has_a_case() -> None:
    assert [row.pattern for row in MODEL_RULES] == list(MODEL_CASES)
    assert [row.name for row in PROVIDER_RULES] == list(PROVIDER_CASES)


@pytest.mark.parametrize("row", MODEL_RULES, ids=lambda row: row.pattern)
def test_model_row(row: ModelPattern) -> None:
    matching, other, turns, on_miss = MODEL_CASES[row.pattern]
    assert (row.turns, row.on_miss) == (turns, on_miss)
    for model in matching:
        assert row.matches(model), model
        # Alone (a provider no row names), the row decides.
        assert strictness("someprovider", model) == StrictRule(
            f"model:{row.pattern}", turns, on_miss
        )
    for model in other:
        assert not row.matches(model), model


@pytest.mark.parametrize("row", PROVIDER_RULES, ids=lambda row: row.name)
def test_provider_row(row: ProviderName) -> None:
    turns, on_miss = PROVIDER_CASES[row.name]
    rule = StrictRule(f"provider:{row.name}", turns, on_miss)
    assert strictness(row.name, "some-plain-model") == rule
    assert strictness(row.name.upper(), "some-plain-model") == rule


@pytest.mark.parametrize(
    ("provider", "model"),
    [("openai", "gpt-4o"), ("openrouter", "deepseek-v3"), ("mistral", "mistral-large"), ("x", "")],
)
def test_nothing_matches(provider: str, model: str) -> None:
    assert strictness(provider, model) is None


def test_a_gateway_widens_a_model_row_to_every_turn() -> None:
    rule = strictness("together", "deepseek-ai/DeepSeek-R1")
    assert rule == StrictRule("model:deepseek-r1+provider:together", ALL, EMPTY)


def test_the_model_row_keeps_its_turns_under_a_narrower_provider() -> None:
    assert strictness("deepseek", "deepseek-chat") == StrictRule(
        "model:deepseek-chat+provider:deepseek", TOOLS, EMPTY
    )


def test_a_rejecting_model_wins_over_its_provider() -> None:
    rule = strictness("deepseek", "deepseek-reasoner")
    assert rule is not None
    assert rule.turns is REJECTS
    assert not rule.restores
    assert strictness("fireworks", "deepseek-reasoner") == rule


def test_first_matching_model_row_wins() -> None:
    # "deepseek-v4-pro" matches both V4 rows; the first one decides.
    rule = strictness("x", "deepseek-v4-pro")
    assert rule is not None
    assert rule.source == f"model:{MODEL_RULES[3].pattern}"


@pytest.mark.parametrize(
    ("strict", "provider", "model", "expected"),
    [
        (None, "deepseek", "deepseek-chat", strictness("deepseek", "deepseek-chat")),
        (None, "plain", "gpt-4o", None),
        (False, "deepseek", "deepseek-chat", None),
        (True, "plain", "gpt-4o", FORCED),
        (True, "plain", "kimi-k2", strictness("plain", "kimi-k2")),
        # strict: true over a rejecting model row: the provider's row, else FORCED.
        (True, "deepseek", "deepseek-reasoner", StrictRule("provider:deepseek", TOOLS, EMPTY)),
        (True, "plain", "deepseek-reasoner", FORCED),
    ],
)
def test_rule_for_the_provider_setting(
    strict: bool | None, provider: str, model: str, expected: StrictRule | None
) -> None:
    assert rule_for(strict, provider, model) == expected
