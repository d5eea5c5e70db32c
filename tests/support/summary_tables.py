"""Tables a test shows at the end of the run (test_echo_matrix's client matrix,
test_cursor_custom_tools's agent sessions), with or without pytest-xdist.

A worker's output never reaches the terminal, so a table printed from a worker's fixture
was lost under ``-n``. A test therefore does not print its rows: :func:`record_rows`
attaches them to its report (``record_property``: xdist ships a report's
``user_properties`` from the worker to the controller), and the controller's (or the
only process's) ``pytest_terminal_summary`` prints each table once, tables by title and
rows in their tests' order (by function, then test id), whichever worker ran them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import pytest

PROPERTY: Final = "summary_table"
RecordProperty = Callable[[str, object], None]  # pytest's record_property fixture

# title -> (header lines, {(file, line, test id): rows}), from the reports as they come.
_tables: dict[str, tuple[list[str], dict[tuple[str, int, str], list[str]]]] = {}


def record_rows(
    record_property: RecordProperty,
    title: str,
    header: Sequence[str],
    rows: Sequence[str],
) -> None:
    """Add ``rows`` (finished lines) to the table ``title`` shown after the run; tests
    giving the same title share one table (the first header is kept)."""
    record_property(PROPERTY, {"title": title, "header": list(header), "rows": list(rows)})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call":  # each phase's report repeats the test's properties
        return
    for name, value in report.user_properties:
        if name == PROPERTY and isinstance(value, dict):
            _, rows = _tables.setdefault(value["title"], (list(value["header"]), {}))
            path, line, _ = report.location
            key = (path, line or 0, report.nodeid)  # the tests' order in their module
            rows.setdefault(key, []).extend(value["rows"])


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # a worker: its controller prints them
        return
    for title, (header, by_test) in sorted(_tables.items()):
        terminalreporter.write_line("")
        terminalreporter.write_line(title)
        for line in header:
            terminalreporter.write_line(line)
        for test in sorted(by_test):
            for line in by_test[test]:
                terminalreporter.write_line(line)
    _tables.clear()
