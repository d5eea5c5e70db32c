"""The reason codes are one documented list: each is documented and each is produced."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from relay.core.receipts import Reason

ROOT = Path(__file__).resolve().parents[3]
REFERENCE = (ROOT / "docs" / "replay-cache.md").read_text(encoding="utf-8")
SOURCES = "\n".join(
    p.read_text(encoding="utf-8") for p in (ROOT / "relay").rglob("*.py") if p.name != "receipts.py"
)


@pytest.mark.parametrize("reason", list(Reason), ids=lambda r: r.value)
def test_reason_is_documented_and_used(reason: Reason) -> None:
    assert f"| `{reason.value}` |" in REFERENCE, "add it to docs/replay-cache.md's reason table"
    assert re.search(rf"Reason\.{reason.name}\b", SOURCES), "an unused code: remove it"


def test_the_reference_lists_no_stale_codes() -> None:
    table = REFERENCE[REFERENCE.index("| Code | Kind | Meaning |") :].split("\n\n", 1)[0]
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", table, re.MULTILINE))
    assert documented == {reason.value for reason in Reason}
