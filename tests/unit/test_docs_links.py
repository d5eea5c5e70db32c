"""Every relative link in the README and docs/ leads to a file that exists and, with an
anchor, to a heading in it (GitHub's anchors): the README points into docs/ for detail, so
a renamed section must not leave it pointing nowhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCED = re.compile(r"^ *```.*?^ *```$", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\]\(([^()\s]+)\)")


def prose(path: Path) -> str:
    """The document without its code blocks and code spans (no links live there)."""
    text = FENCED.sub("", path.read_text(encoding="utf-8"))
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens,
    a repeated heading numbered."""
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", FENCED.sub("", path.read_text()), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        candidate, n = slug, 0
        while candidate in found:
            n += 1
            candidate = f"{slug}-{n}"
        found.add(candidate)
    return found


def test_anchors_follow_githubs_rules() -> None:
    readme = anchors(ROOT / "README.md")
    assert {"why", "quickstart", "running-it-as-a-service", "strict-thinking-mode-providers"} <= (
        readme
    )
    assert "relay-status" in anchors(ROOT / "docs" / "operating.md")  # "## `relay status`"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(document: Path) -> None:
    broken = []
    for target in LINK.findall(prose(document)):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        file, _, anchor = target.partition("#")
        path = (document.parent / file).resolve() if file else document
        if not path.exists():
            broken.append(f"{target}: no {path.relative_to(ROOT)}")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading #{anchor}")
    assert not broken, broken
