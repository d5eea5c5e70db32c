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


def slugify(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens,
    a repeated heading numbered."""
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", FENCED.sub("", path.read_text()), re.M):
        slug = slugify(heading)
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


# --- citations in the code ------------------------------------------------------------------
# Comments and docstrings cite "design §N", "docs/<file>.md, *Heading*" and the README's
# sections; each must lead somewhere in this repository, never to material outside it.
CODE_FOLDERS = ("relay", "fakeupstream", "scenarios", "live", "tests")
DESIGN = ROOT / "docs" / "design.md"
DESIGN_REF = re.compile(r"design(?:\.md)?`{0,2} +(§\d+(?:[^§\n]{0,16}?§\d+)*)")
DOC_HEADING_REF = re.compile(r"docs/([\w-]+\.md)`{0,2},? +\*([^*]+)\*")
DOC_FILE_REF = re.compile(r"docs/([\w-]+\.md)")
README_HEADING_REF = re.compile(r"README(?:'s)?,? +(?:\*([^*]+)\*|\"([^\"]+)\" section)")
OUTSIDE_REF = re.compile(r"shared/(?:notes|spec)\S*|spec §|wire-formats|reasoning-replay-relay\.md")


def broken_citations(text: str) -> list[str]:
    """The citations in ``text`` (a code file) that lead nowhere in the repository."""
    flat = re.sub(r"\s*\n\s*(?:#+ *)?", " ", text)  # a citation may wrap, in a comment too
    sections = {int(n) for n in re.findall(r"^## §(\d+) ", DESIGN.read_text(), re.M)}
    broken = [f"outside the repo: {m.group(0)!r}" for m in OUTSIDE_REF.finditer(flat)]
    for match in DESIGN_REF.finditer(flat):
        cited = {int(n) for n in re.findall(r"§(\d+)", match.group(1))}
        broken += [f"no design §{n}" for n in sorted(cited - sections)]
    for name in DOC_FILE_REF.findall(flat):
        if not (ROOT / "docs" / name).is_file():
            broken.append(f"no docs/{name}")
    for name, heading in DOC_HEADING_REF.findall(flat):
        path = ROOT / "docs" / name
        if path.is_file() and slugify(heading) not in anchors(path):
            broken.append(f"no heading {heading!r} in docs/{name}")
    for starred, quoted in README_HEADING_REF.findall(flat):
        if slugify(starred or quoted) not in anchors(ROOT / "README.md"):
            broken.append(f"no heading {starred or quoted!r} in README.md")
    return broken


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ('"""Status (design §18)."""', 0),
        ('"""Status (design §99)."""', 1),
        ("# the plan (design §1 steps 4-8, §4, §98)", 1),
        ("# see ``docs/design.md`` §6 and design §2-§4", 0),
        # Split in two: test_self_contained refuses the whole path in a string literal.
        ('"""Texts come from ``shared/' + 'notes/wire-formats.md``."""', 1),
        ('"""Operating the relay (spec §8, §11)."""', 1),
        ('"""(docs/replay-cache.md, *Disk pressure*)."""', 0),
        ('"""(docs/replay-cache.md, *Disk\n    pressure*)."""', 0),
        ('"""(docs/replay-cache.md, *Disk trouble*)."""', 1),
        ('"""(docs/nowhere.md)."""', 1),
        ("# survives the relay (README, *No such section*).", 1),
        ('# see the README\'s "Live acceptance" section', 0),
    ],
)
def test_broken_citations_finds_what_leads_nowhere(text: str, found: int) -> None:
    assert len(broken_citations(text)) == found


def test_every_citation_in_the_code_resolves() -> None:
    here = Path(__file__).resolve()
    files = [
        path
        for folder in CODE_FOLDERS
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != here and path.name != "test_self_contained.py"  # their samples cite outside
    ]
    assert len(files) > 100, "the walk missed the code"
    broken = {
        str(path.relative_to(ROOT)): found
        for path in files
        if (found := broken_citations(path.read_text(encoding="utf-8")))
    }
    assert broken == {}
