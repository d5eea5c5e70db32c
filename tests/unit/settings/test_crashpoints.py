"""relay.settings.crashpoints: off by default, env-only, SIGKILL on the armed hit, nothing flushed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import timeit
from pathlib import Path

import pytest

from relay.settings import crashpoints
from relay.settings.crashpoints import KNOWN_POINTS, CrashPointSpecError, parse_spec
from scenarios.requirements import crash_points_missing

ROOT = Path(__file__).resolve().parents[3]


def run_child(code: str, crash_at: str | None) -> subprocess.CompletedProcess[str]:
    # Unbuffered stdout would defeat the "nothing flushed" check.
    drop = {"RELAY_TEST_CRASH_AT", "PYTHONUNBUFFERED"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = str(ROOT)
    if crash_at is not None:
        env["RELAY_TEST_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


CHILD = """
    import os, sys
    from relay.settings.crashpoints import crash_point
    print("buffered output that a SIGKILL must lose", end="")  # stdout is a pipe: buffered
    for name in sys.argv[1:] or ["after_upstream_headers", "before_terminal_frame"] * 3:
        os.write(2, f"at {name}\\n".encode())
        crash_point(name)
    os.write(2, b"survived\\n")
"""


def test_unset_is_a_no_op() -> None:
    result = run_child(CHILD, None)
    assert result.returncode == 0
    assert result.stderr.endswith("survived\n")
    assert result.stdout == "buffered output that a SIGKILL must lose"


def test_armed_point_sigkills_on_first_hit_and_flushes_nothing() -> None:
    result = run_child(CHILD, "before_terminal_frame")
    assert result.returncode == -signal.SIGKILL
    assert result.stdout == ""  # Python's buffer died with the process
    lines = result.stderr.splitlines()
    assert lines == [
        "at after_upstream_headers",
        "at before_terminal_frame",
        "crash_point before_terminal_frame hit=1 SIGKILL",
    ]


def test_nth_hit() -> None:
    result = run_child(CHILD, "after_upstream_headers@3")
    assert result.returncode == -signal.SIGKILL
    hits = [line for line in result.stderr.splitlines() if line == "at after_upstream_headers"]
    assert len(hits) == 3
    assert result.stderr.splitlines()[-1] == "crash_point after_upstream_headers hit=3 SIGKILL"


def test_several_points_first_reached_wins() -> None:
    result = run_child(CHILD, " before_terminal_frame@2 , after_upstream_headers@2")
    assert result.returncode == -signal.SIGKILL
    assert result.stderr.splitlines()[-1] == "crash_point after_upstream_headers hit=2 SIGKILL"


def test_unknown_point_fails_at_import_naming_the_known_ones() -> None:
    result = run_child("import relay.settings.crashpoints", "before_termnal_frame")
    assert result.returncode == 1
    assert "unknown crash point 'before_termnal_frame'" in result.stderr
    assert "before_terminal_frame" in result.stderr


def test_environment_is_read_once_at_import() -> None:
    code = """
        import os
        from relay.settings.crashpoints import crash_point, armed_points
        os.environ["RELAY_TEST_CRASH_AT"] = "before_terminal_frame"
        crash_point("before_terminal_frame")
        print(armed_points())
    """
    result = run_child(code, None)
    assert result.returncode == 0
    assert result.stdout.strip() == "{}"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", {}),
        ("before_terminal_frame", {"before_terminal_frame": 1}),
        (
            "after_terminal_frame@4,before_upstream_send",
            {"after_terminal_frame": 4, "before_upstream_send": 1},
        ),
        (" , before_terminal_frame@ 2", {"before_terminal_frame": 2}),
    ],
)
def test_parse_spec(raw: str, expected: dict[str, int]) -> None:
    assert parse_spec(raw) == expected


@pytest.mark.parametrize("raw", ["nope", "before_terminal_frame@0", "before_terminal_frame@x"])
def test_parse_spec_rejects(raw: str) -> None:
    with pytest.raises(CrashPointSpecError):
        parse_spec(raw)


def test_known_points_are_unique_identifiers() -> None:
    assert len(set(KNOWN_POINTS)) == len(KNOWN_POINTS)
    assert all(name.isidentifier() for name in KNOWN_POINTS)


def test_only_the_environment_can_arm_a_point() -> None:
    """No other relay module reads the variable (so no config file or HTTP path can)."""
    readers = [
        path.relative_to(ROOT)
        for path in (ROOT / "relay").rglob("*.py")
        if "RELAY_TEST_CRASH_AT" in path.read_text(encoding="utf-8")
        and path.name != "crashpoints.py"
    ]
    assert readers == []


def test_cost_when_unset_is_negligible() -> None:
    assert crashpoints.armed_points() == {} or os.environ.get("RELAY_TEST_CRASH_AT")
    seconds = timeit.timeit(
        lambda: crashpoints.crash_point("before_terminal_frame"), number=100_000
    )
    assert seconds < 0.5  # ~50 ns a call; generous for loaded CI machines


def test_the_relay_reaches_every_known_point() -> None:
    """Scenarios needing crash points skip when the relay names none: every known point
    must be reached (a call, or a pipeline action naming it), so none skips silently."""
    assert crash_points_missing() is None


def test_every_known_point_is_called_somewhere_in_the_relay() -> None:
    """A point nobody calls would make a "kill at every point" loop pass vacuously."""
    assert crashpoints.KNOWN_POINTS == (
        crashpoints.REQUEST_POINTS
        + crashpoints.BACKUP_POINTS
        + crashpoints.GAP_POINTS
        + crashpoints.REPLACE_POINTS
    )
    sources = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "relay").rglob("*.py"))
    for name in KNOWN_POINTS:
        assert f'crash_point("{name}")' in sources or f'crash_point="{name}"' in sources, name
