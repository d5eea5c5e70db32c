"""The README's quickstart, run exactly as written against a real ``relay serve``.

The quickstart's code blocks open with a ``# quickstart: <step>`` comment; this test finds
them by it and runs them in a fresh directory, as a reader would: the start command with
the default data directory (``./data``), then the ``curl`` request and the Python snippet in
that directory, then the same start command again and the request that continues the
first conversation after the restart, and that request again with the ``X-Relay-Replay``
header shown. The liberties taken: the README's address
(``127.0.0.1:8787``) becomes the port the relay actually bound (``RELAY_PORT=0``), so the
test never collides with a relay already running, and ``relay serve`` runs as ``python -m
relay serve``, the same entry point. What the README says the reader will see -- the
answers, the printed output, the ``cache_plan`` log line -- is read from the README too,
and compared.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from tests.support.log_leaks import observe_process
from tests.support.relay_cli import relay_env, serving

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
LABEL = "README quickstart"
ADDRESS = "127.0.0.1:8787"  # as the README writes it; replaced by the bound one
MARKER = re.compile(r"^# quickstart: (\S+)$")
FENCE = re.compile(r"^ *```(\w*)\n(.*?)^ *```$", re.MULTILINE | re.DOTALL)


def blocks() -> list[tuple[str, str]]:
    """Every fenced block of the README, in order: (language, text)."""
    return [(m[1], m[2]) for m in FENCE.finditer(README)]


def quickstart() -> dict[str, str]:
    found: dict[str, str] = {}
    for _, text in blocks():
        marker = MARKER.match(text.split("\n", 1)[0])
        if marker:
            assert marker[1] not in found, f"two quickstart blocks named {marker[1]}"
            found[marker[1]] = text
    return found


def output_after(step: str) -> str:
    """The ``text`` block right after a step's block: what the README says it prints."""
    texts = [text for _, text in blocks()]
    following = blocks()[texts.index(quickstart()[step]) + 1]
    assert following[0] == "text", f"no output shown after the {step} block"
    return following[1]


def documented_content(user_text: str) -> str:
    """The answer content the README promises for a request ending with ``user_text``,
    written there as a JSON string."""
    found = re.search(rf'`("Echo: {re.escape(user_text)}\\n[^`]*")`', README)
    assert found, f"the README shows no answer to {user_text!r}"
    content: str = json.loads(found[1])
    return content


def start_command(block: str) -> tuple[dict[str, str], list[str]]:
    """The start block's one command: its ``NAME=value`` prefixes and its words."""
    (line,) = [x for x in block.splitlines() if x.strip() and not x.startswith("#")]
    words = shlex.split(line)
    assignments = {}
    while "=" in words[0]:
        name, value = words.pop(0).split("=", 1)
        assignments[name] = value
    return assignments, words


def field_names(log_line: str) -> list[str]:
    return re.findall(r" (\w+)=", log_line)


class Reader:
    """Runs the reader's steps in their directory, against one relay's address."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.origin = ""
        # The reader's shell: no relay or upstream settings of the developer's.
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RELAY_"))}

    def here(self, text: str) -> str:
        assert ADDRESS in text
        return text.replace(ADDRESS, self.origin)

    def shell(self, block: str) -> str:
        done = subprocess.run(
            ["bash", "-c", self.here(block)],
            cwd=self.home, env=self.env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    def python(self, block: str) -> str:
        script = self.home / "quickstart.py"
        script.write_text(self.here(block), encoding="utf-8")
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=self.home, env=self.env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout


def answer_content(raw: str) -> str:
    answer: dict[str, Any] = json.loads(raw)
    assert answer["object"] == "chat.completion"
    content: str = answer["choices"][0]["message"]["content"]
    return content


@contextmanager
def running(start: str, reader: Reader) -> Iterator[list[str]]:
    """The start block's command, run as the reader would, in the reader's directory with
    the default data directory. Yields the relay's log lines once the block ends (the reader
    pressed Ctrl-C). ``relay serve`` runs as ``python -m relay serve``: the installed
    ``relay`` script is the same ``relay.app.cli:main`` (checked here; the launchd test in
    test_service_recipes.py runs the script itself)."""
    assignments, words = start_command(start)
    assert words == ["relay", "serve"]
    (script,) = entry_points(group="console_scripts", name=words[0])
    assert script.value == "relay.app.cli:main"
    assert "OPENAI_API_KEY" not in assignments  # the offline quickstart
    env = relay_env(reader.home, **assignments)
    del env["RELAY_DATA_DIR"]  # the README relies on the default, ./data
    log: list[str] = []
    with serving(env, LABEL, cwd=reader.home) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        reader.origin = ""
        for line in proc.stdout:
            listening = re.search(r"listening on http://(127\.0\.0\.1:\d+)/v1", line)
            if listening:
                reader.origin = listening[1]
                break
        assert reader.origin, proc.stderr.read()
        yield log
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert proc.wait(15) == 0
        log += proc.stderr.read().splitlines()
    observe_process(LABEL, "\n".join(log), env)


def replayed(log: list[str]) -> list[int]:
    """``replayed=N`` of each ``cache_plan`` line, in order."""
    plans = [line for line in log if " cache_plan " in line]
    counts = [int(m[1]) for line in plans if (m := re.search(r" replayed=(\d+) ", line))]
    assert len(counts) == len(plans)
    return counts


def test_the_quickstart_runs_as_written(tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed: the quickstart's request uses it")
    steps = quickstart()
    assert list(steps) == ["start", "request", "python", "after-restart", "header"]
    reader = Reader(tmp_path)

    with running(steps["start"], reader) as log:
        assert (tmp_path / "data" / "relay-token").is_file()
        first = answer_content(reader.shell(steps["request"]))
        assert first == documented_content("Hello")
        assert first.endswith("continuity: replayed=0 intact=0 misplaced=0")
        printed = reader.python(steps["python"])
        assert printed == output_after("python")
        assert "continuity: replayed=1 intact=1 misplaced=0" in printed
    assert replayed(log) == [0, 0, 1]  # curl's turn, then the snippet's two
    (shown,) = [line for line in README.splitlines() if " cache_plan " in line]
    last = [line for line in log if " cache_plan " in line][-1]
    assert field_names(shown) == field_names(last)  # the README's log line, as logged
    assert " replayed=1 " in shown

    # Ctrl-C, the same command again: the curl conversation continues with its reasoning.
    with running(steps["start"], reader) as log:
        after = answer_content(reader.shell(steps["after-restart"]))
        header = reader.shell(steps["header"]).replace("\r\n", "\n")  # HTTP's line ends
    assert after == documented_content("Still there?")
    assert after.endswith("continuity: replayed=1 intact=1 misplaced=0")
    assert header == output_after("header")
    assert header == "X-Relay-Replay: replayed=1\n"
    assert replayed(log) == [1, 1]  # the request, then the same one with -si
