"""The repository is self-contained: a fresh clone tests against its own files only.

On the developers' machines a folder of reference material sits beside the checkout
(``../shared``); CI's fresh clone has none. Code that reads it passes locally and fails
there, so no tracked code may name it (docs prose may), the recordings the tests replay
live in ``tests/fixtures/`` (reached through :mod:`tests.support.recordings`), and
``.ci/run`` runs the README's test command in a fresh clone.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from tests.support import recordings

ROOT = Path(__file__).resolve().parents[2]
THIS_FILE = Path(__file__).resolve().relative_to(ROOT).as_posix()  # its samples name it
# A path into the shared folder, however it is spelled in a string.
OUTSIDE = re.compile(r"\.\./shared\b|/work/shared\b|\bshared/(?:fixtures|notes|spec)\b")
CONFIG_SUFFIXES = frozenset({".sh", ".toml", ".cfg", ".ini", ".yml", ".yaml"})
README_TEST_COMMAND = "python3 -m pip install --quiet nox && python3 -m nox -s tests"


def references_outside(path: str, text: str) -> list[str]:
    """What in ``text`` (the file ``path``) points into the shared folder, docs excluded:
    Python string literals other than docstrings (and a ``"shared"`` path component
    joined with ``/``); in scripts and configuration, every line but comments."""
    if path.endswith(".py"):
        return _python_references(ast.parse(text, filename=path))
    lines = (line for line in text.splitlines() if not line.lstrip().startswith("#"))
    return [line.strip() for line in lines if OUTSIDE.search(line)]


def _python_references(tree: ast.Module) -> list[str]:
    documented = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, documented)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings and OUTSIDE.search(node.value):
                found.append(node.value)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            for side in (node.left, node.right):
                if isinstance(side, ast.Constant) and side.value == "shared":
                    found.append(ast.unparse(node))
    return found


def is_code(path: str, text: str) -> bool:
    suffix = Path(path).suffix
    return suffix == ".py" or suffix in CONFIG_SUFFIXES or (not suffix and text.startswith("#!"))


@pytest.mark.parametrize(
    ("path", "text", "found"),
    [
        ("t.py", 'R = Path(__file__).parents[2].parent / "shared/fixtures/x"\n', 1),
        ("t.py", 'R = Path(__file__).parent.parent / "shared" / "fixtures"\n', 1),
        ("t.py", 'open("../shared/notes/wire-formats.md")\n', 1),
        ("t.py", 'p = f"/work/shared/{name}"\n', 1),
        ("t.py", '"""Texts come from ``shared/notes/wire-formats.md``."""\n', 0),
        ("t.py", 'def f():\n    """See ../shared/spec."""\n    return 1\n', 0),
        ("t.py", "# the shared fixtures sit in ../shared\nx = 1\n", 0),
        ("t.py", 'mode = "shared"\nshared = 2 / 1\n', 0),
        ("t.py", 'R = ROOT / "tests/fixtures/cursor-recordings"\n', 0),
        ("run", "#!/bin/sh\n# no ../shared beside it\ncp -r ../shared/fixtures .\n", 1),
        ("run", "#!/bin/sh\n# no ../shared beside the clone\nexit 0\n", 0),
        ("setup.cfg", "[x]\ndata = ../shared/fixtures\n", 1),
    ],
)
def test_references_outside_finds_code_not_prose(path: str, text: str, found: int) -> None:
    assert len(references_outside(path, text)) == found


def tracked_files() -> list[str]:
    try:
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z"],
            capture_output=True,
            check=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"not a git checkout, cannot list tracked files: {exc}")
    return [name for name in listed.decode().split("\0") if name]


def test_no_tracked_code_reads_the_shared_folder() -> None:
    offenders = {}
    checked = 0
    for name in tracked_files():
        path = ROOT / name
        if name == THIS_FILE or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if not is_code(name, text):
            continue
        checked += 1
        if found := references_outside(name, text):
            offenders[name] = found
    assert checked > 100, "the listing missed the code"
    assert offenders == {}, "use tests/support/recordings.py; nothing may read ../shared"


def test_every_recording_is_in_the_repo() -> None:
    assert recordings.RECORDINGS.is_relative_to(ROOT / "tests" / "fixtures")
    assert len(recordings.folders()) == 6
    licence = (recordings.RECORDINGS / "LICENSE").read_text(encoding="utf-8")
    assert licence.startswith("Copyright 2025 Gabriel Gavilan")


def test_listing_no_recordings_fails(tmp_path: Path) -> None:
    with pytest.raises(recordings.RecordingsMissing, match="no recordings"):
        recordings.stream_paths(tmp_path / "absent")
    with pytest.raises(recordings.RecordingsMissing, match="no recordings"):
        recordings.request_paths(tmp_path)  # exists, but empty
    (tmp_path / "README.md").write_text("not a recording")
    with pytest.raises(recordings.RecordingsMissing, match="no recordings"):
        recordings.names(tmp_path)


def test_an_incomplete_recording_fails(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / recordings.REQUEST).write_text("{}")
    with pytest.raises(recordings.RecordingsMissing, match=recordings.STREAM):
        recordings.folders(tmp_path)
    (tmp_path / "one" / recordings.STREAM).write_text("data: {}\n\n")
    assert recordings.stream_paths(tmp_path) == [tmp_path / "one" / recordings.STREAM]
    with pytest.raises(recordings.RecordingsMissing, match="'two'"):
        recordings.folder("two", tmp_path)


def test_ci_runs_the_readme_test_command_in_a_fresh_clone() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert README_TEST_COMMAND in readme
    commands = [line.strip() for line in script.splitlines() if not line.lstrip().startswith("#")]
    assert any(line.startswith(README_TEST_COMMAND) for line in commands)
    assert "git clone" in script and "mktemp -d" in script
