"""The tables tests show after the run (tests/support/summary_tables.py): printed once by
the process that owns the terminal, from the rows the tests attached to their reports,
under pytest-xdist as without it (a worker's own output never reaches the terminal)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

TESTS = """
import pytest
from tests.support.summary_tables import record_rows

@pytest.mark.parametrize("n", [2, 1])
def test_shared(record_property, n):
    record_rows(record_property, "numbers", ["n | square"], [f"{n} | {n * n}"])

def test_other(record_property):
    record_rows(record_property, "letters", ["letter"], ["a", "b"])
    assert False, "a failing test's rows still show"
"""


@pytest.mark.parametrize("workers", ["0", "2"])
def test_the_rows_of_every_test_show_once_after_the_run(tmp_path: Path, workers: str) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_tables.py").write_text(TESTS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.support.summary_tables", "-p", "xdist",
         "-n", workers, "-p", "no:cacheprovider", "test_tables.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr  # test_other fails
    lines = done.stdout.splitlines()
    start = lines.index("letters")
    # Tables by title, each with its header once; rows by test id, each test's once.
    assert lines[start : start + 9] == [
        "letters", "letter", "a", "b", "", "numbers", "n | square", "1 | 1", "2 | 4",
    ]  # fmt: skip
    assert done.stdout.count("2 | 4") == done.stdout.count("1 | 1") == 1
