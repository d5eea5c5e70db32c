"""The configuration tables (every setting in docs/configuration.md, the essentials in the
README) and the README's provider example stay true to relay.settings.config."""

from __future__ import annotations

import json
import re
from pathlib import Path

from relay.settings.config import load_config
from relay.strict.rules import rule_for

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
REFERENCE = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
CONFIG = (ROOT / "relay" / "settings" / "config.py").read_text(encoding="utf-8")


def rows(document: str) -> dict[str, str]:
    return {m[1]: m[0] for m in re.finditer(r"^\| `([A-Z_]+)` \|.*$", document, re.MULTILINE)}


def test_every_variable_is_in_the_reference_table() -> None:
    read = set(re.findall(r'"((?:RELAY|OPENAI|REASONING|LOG)_[A-Z_]+)"', CONFIG))
    table = set(rows(REFERENCE))
    assert read, "no variables found in relay/settings/config.py"
    assert read <= table, f"add to docs/configuration.md: {sorted(read - table)}"
    assert table <= read, f"not read by relay/settings/config.py: {sorted(table - read)}"


def test_the_readme_essentials_are_rows_of_the_reference_table() -> None:
    """Same words in both places (links adjusted to the README's folder)."""
    essentials = rows(README)
    reference = rows(REFERENCE)
    assert {"OPENAI_API_KEY", "RELAY_DATA_DIR", "REASONING_CACHE_ENABLED"} <= set(essentials)
    for name, row in essentials.items():
        assert row.replace("](docs/", "](") == reference[name], name


def test_the_deepseek_example_is_a_valid_configuration() -> None:
    raw = re.search(r"export RELAY_PROVIDERS='(.*?)'", README, re.DOTALL)
    assert raw is not None
    example = json.loads(raw.group(1))
    config = load_config({"RELAY_PROVIDERS": raw.group(1), "DEEPSEEK_API_KEY": "sk-x"})
    provider = config.providers["deepseek"]
    assert provider.url == "https://api.deepseek.com/chat/completions"
    assert example["deepseek"]["strict"] is True
    rule = rule_for(provider.strict, "deepseek", "deepseek-reasoner")
    assert rule is not None and rule.restores  # the example restores for deepseek-reasoner
    assert "`deepseek/deepseek-reasoner`" in README
