"""Which Chat Completions upstreams need ``reasoning_content`` passed back, and where.

Everything that decides strictness is data in this module: two tables and one combining
function, each row with a unit test (``tests/unit/strict/test_rules.py``). A rule says

- ``turns``: which assistant messages must carry their reasoning —
  ``tool_calls`` (messages with tool calls: DeepSeek's thinking-mode documentation, Kimi's
  error text), ``all_with_tools`` (every assistant message once the request has ``tools``,
  tool-call messages always: what one gateway enforces), or ``rejects`` (a legacy model
  that answers 400 when a ``reasoning_content`` *is* sent: the relay strips it instead);
- ``on_miss``: what a message that needs reasoning gets when none is stored —
  ``empty`` (``""``: older DeepSeek accepted it as "no reasoning for this turn") or
  ``absent`` (left out; the provider decides). Reasoning text is never invented.

Matching: model patterns are searched case-insensitively in the upstream model name (the
part after ``<provider>/``); provider names compare case-insensitively. A model row
describes the model's own protocol, so it decides, except that a provider row may widen
the turns (a gateway that checks every turn does so for every model it serves). A
``rejects`` model row always wins: that model refuses the field outright.

Why these defaults:

- DeepSeek family (``deepseek`` provider, ``deepseek-chat``, ``deepseek-r1``, V4 names):
  tool-call turns (documented), ``""`` on a miss (the legacy fallback DeepSeek accepted).
- ``deepseek-reasoner``: the legacy model rejects a sent ``reasoning_content``, so it is
  stripped. DeepSeek's current API serves thinking mode under that name and needs it on
  tool turns: set the provider's ``strict`` to ``true`` for that (see docs/strict-providers.md).
- Kimi, QwQ, Qwen/GLM thinking, MiMo: tool-call turns (Kimi's error names the "assistant
  tool call message"); on a miss the field stays absent (no documented fallback).
- Gateways (opencode-go, siliconflow, nebius, deepinfra, sambanova, fireworks, together):
  every turn once ``tools`` is present — one gateway reports that rule, and restoring a
  plain turn's own reasoning is harmless where only tool turns are checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Final


class Turns(StrEnum):
    TOOL_CALLS = "tool_calls"
    ALL_WITH_TOOLS = "all_with_tools"
    REJECTS = "rejects"


class OnMiss(StrEnum):
    EMPTY = "empty"
    ABSENT = "absent"


@dataclass(frozen=True)
class StrictRule:
    """The rule in force for one provider and model; ``source`` names the rows that made it."""

    source: str
    turns: Turns
    on_miss: OnMiss

    @property
    def restores(self) -> bool:
        """Whether reasoning is restored (``False``: the field is stripped)."""
        return self.turns is not Turns.REJECTS


@dataclass(frozen=True)
class ModelPattern:
    pattern: str
    turns: Turns
    on_miss: OnMiss

    def matches(self, model: str) -> bool:
        return re.search(self.pattern, model, re.IGNORECASE) is not None

    @property
    def rule(self) -> StrictRule:
        return StrictRule(f"model:{self.pattern}", self.turns, self.on_miss)


@dataclass(frozen=True)
class ProviderName:
    name: str
    turns: Turns
    on_miss: OnMiss

    @property
    def rule(self) -> StrictRule:
        return StrictRule(f"provider:{self.name}", self.turns, self.on_miss)


_TOOLS, _ALL, _REJECTS = Turns.TOOL_CALLS, Turns.ALL_WITH_TOOLS, Turns.REJECTS
_EMPTY, _ABSENT = OnMiss.EMPTY, OnMiss.ABSENT

# First match wins, so the legacy name comes before anything that could also match it.
MODEL_RULES: Final[tuple[ModelPattern, ...]] = (
    ModelPattern(r"deepseek-reasoner", _REJECTS, _ABSENT),
    ModelPattern(r"deepseek-r1", _TOOLS, _EMPTY),
    ModelPattern(r"deepseek-chat", _TOOLS, _EMPTY),
    ModelPattern(r"deepseek[-/]?v4[-.](?:flash|pro)(?:-free)?", _TOOLS, _EMPTY),
    ModelPattern(r"(?:deepseek|zen/deepseek)-v4", _TOOLS, _EMPTY),
    ModelPattern(r"kimi-k2", _TOOLS, _ABSENT),
    ModelPattern(r"qwq", _TOOLS, _ABSENT),
    ModelPattern(r"qwen.*think", _TOOLS, _ABSENT),
    ModelPattern(r"glm.*think", _TOOLS, _ABSENT),
    ModelPattern(r"^mimo[-.]?v\d", _TOOLS, _ABSENT),
)

PROVIDER_RULES: Final[tuple[ProviderName, ...]] = (
    ProviderName("deepseek", _TOOLS, _EMPTY),
    ProviderName("opencode-go", _ALL, _ABSENT),
    ProviderName("siliconflow", _ALL, _ABSENT),
    ProviderName("nebius", _ALL, _ABSENT),
    ProviderName("deepinfra", _ALL, _ABSENT),
    ProviderName("sambanova", _ALL, _ABSENT),
    ProviderName("fireworks", _ALL, _ABSENT),
    ProviderName("together", _ALL, _ABSENT),
    ProviderName("xiaomi-mimo", _TOOLS, _ABSENT),
)

# ``strict: true`` on a provider and model no row restores for.
FORCED: Final = StrictRule("forced", Turns.TOOL_CALLS, OnMiss.ABSENT)


def strictness(provider: str, model: str) -> StrictRule | None:
    """The rule the tables give (``strict: "auto"``), or ``None``: not strict."""
    by_model = next((row for row in MODEL_RULES if row.matches(model)), None)
    by_provider = next((row for row in PROVIDER_RULES if row.name == provider.lower()), None)
    if by_model is None:
        return None if by_provider is None else by_provider.rule
    if by_provider is None or by_model.turns is Turns.REJECTS:
        return by_model.rule
    turns = Turns.ALL_WITH_TOOLS if _ALL in (by_model.turns, by_provider.turns) else _TOOLS
    source = f"{by_model.rule.source}+{by_provider.rule.source}"
    return StrictRule(source, turns, by_model.on_miss)


def rule_for(strict: bool | None, provider: str, model: str) -> StrictRule | None:
    """The rule in force under a provider's ``strict`` setting (``None``: ``"auto"``).

    ``False``: none (any ``reasoning_content`` sent is stripped). ``True``: the tables' rule
    when it restores, else the provider row's, else :data:`FORCED`.
    """
    if strict is False:
        return None
    found = strictness(provider, model)
    if strict is None or (found is not None and found.restores):
        return found
    by_provider = next((row for row in PROVIDER_RULES if row.name == provider.lower()), None)
    if by_provider is not None and by_provider.turns is not Turns.REJECTS:
        return by_provider.rule
    return FORCED
