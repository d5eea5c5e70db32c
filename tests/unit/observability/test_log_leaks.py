"""The suite's log scan (tests/support/log_leaks.py) can fail: planted secrets are found,
in-process and in a relay subprocess's output, and a run that logged one fails."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fakeupstream.ciphertext import Cipher, Sealed
from tests.support import stack
from tests.support.log_leaks import LeakScanner, LogCollector, secrets_in_env, suite_secrets

ROOT = Path(__file__).resolve().parents[3]


def minted_ciphertext() -> str:
    """An ``encrypted_content`` exactly as the fake upstream mints one."""
    return Cipher(b"k" * 32).seal(
        Sealed("secret", ()), api_key="sk-a", model="m", item_id="rs_1", nonce=b"n" * 16,
        issued_at=1_767_225_600,
    )  # fmt: skip


def test_a_planted_secret_is_found_and_masked_in_the_report() -> None:
    scanner = LeakScanner({"RELAY_TOKEN": "rt-0123456789abcdef"})
    text = "a INFO relay ok\nb INFO relay chat_request auth=rt-0123456789abcdef model=x\n"
    [finding] = scanner.scan("relay-1.stderr", text)
    assert (finding.source, finding.what, finding.line_no) == ("relay-1.stderr", "RELAY_TOKEN", 2)
    assert "rt-0123456789abcdef" not in str(finding)
    assert finding.line == "b INFO relay chat_request auth=<RELAY_TOKEN> model=x"


def test_the_fakes_ciphertext_is_found_without_knowing_it() -> None:
    token = minted_ciphertext()
    assert token.startswith("gAAAAA")
    [finding] = LeakScanner().scan("log", f"x INFO relay cache_plan payload={token[:60]}")
    assert finding.what == "ciphertext" and token[:60] not in finding.line


def test_clean_lines_and_digests_are_not_findings() -> None:
    scanner = LeakScanner(suite_secrets())
    text = (
        "t INFO relay cache_plan request_id=req_0123456789abcdef01234567 scope=0a1b2c3d4e5f "
        "replayed=1 rejected=\"['start_poisoned']\" unmatched=0\n"
        "t INFO relay relay_stopped\n"
    )
    assert scanner.scan("log", text) == []


def test_short_values_are_not_secrets() -> None:
    scanner = LeakScanner({"K": "sk-x"})
    assert scanner.secrets == {}
    assert scanner.scan("log", "model=sk-x") == []


def test_every_occurrence_is_reported() -> None:
    scanner = LeakScanner({"K": stack.UPSTREAM_KEY})
    findings = scanner.scan(
        "log", f"{stack.UPSTREAM_KEY} {stack.UPSTREAM_KEY}\n{stack.UPSTREAM_KEY}"
    )
    assert [f.line_no for f in findings] == [1, 1, 2]


def test_credentials_are_read_from_a_processes_environment_by_name() -> None:
    env = {
        "RELAY_TOKEN": "rt-a",
        "RELAY_ADMIN_TOKEN": "adm",
        "OPENAI_API_KEY": "sk-b",
        "TEST_PROVIDER_KEY": "sk-c",
        "FAKE_SECRET_HEX": "ff",
        "RELAY_PORT": "0",
        "PATH": "/bin",
    }
    assert sorted(secrets_in_env(env).values()) == [
        "FAKE_SECRET_HEX", "OPENAI_API_KEY", "RELAY_ADMIN_TOKEN", "RELAY_TOKEN",
        "TEST_PROVIDER_KEY",
    ]  # fmt: skip


def test_a_subprocess_log_is_checked_against_its_own_and_its_generated_token(
    tmp_path: Path,
) -> None:
    (tmp_path / "relay-token").write_text("generated-token-0123456789\n")
    collector = LogCollector(LeakScanner())
    env = {"RELAY_DATA_DIR": str(tmp_path), "OPENAI_API_KEY": "sk-scenario-0123456789"}
    collector.observe_process("relay-1", "x relay ok sk-scenario-0123456789\n", env)
    collector.observe_process("relay-2", "x relay ok generated-token-0123456789\n", env)
    assert [(f.source, f.what) for f in collector.findings] == [
        ("relay-1", "OPENAI_API_KEY"),
        ("relay-2", "generated relay-token"),
    ]
    # Every secret seen so far applies to in-process lines scanned at the end, too.
    collector.handler.lines.append("y INFO relay probe key=sk-scenario-0123456789")
    assert [f.source for f in collector.finish()][-1] == "in-process log"


# --- the plugin, end to end: a pytest run that logs a secret fails ---------------------------

PLANTED_IN_PROCESS = """
from relay.observability import log
from tests.support.stack import TOKEN

def test_logs_a_token():
    log.event("probe", leaked=TOKEN)
"""

PLANTED_IN_SUBPROCESS = """
import sys
from pathlib import Path
from scenarios.procs import ManagedProcess

def test_a_relay_subprocess_prints_its_key(tmp_path):
    code = "import os, sys; print('ready'); print(os.environ['OPENAI_API_KEY'], file=sys.stderr)"
    env = {"OPENAI_API_KEY": "sk-planted-in-a-subprocess-0123", "PATH": "/usr/bin:/bin"}
    proc = ManagedProcess("relay", [sys.executable, "-c", code], env, log_dir=tmp_path,
                          label="relay-1")
    proc.start("ready")
    proc.wait_exit(10)
"""

CLEAN = """
from relay.observability import log

def test_logs_nothing_secret():
    log.event("probe", count=1)
"""


# Serial, and as `nox -s tests` runs the suite: in a pytest-xdist worker, whose exit status
# and terminal summary the controller does not pass on (one worker shows it as well as 3).
WORKERS = pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["serial", "xdist"])


def run_pytest(
    tmp_path: Path, source: str, workers: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    test = tmp_path / "test_planted.py"
    test.write_text(textwrap.dedent(source))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.support.log_leaks",
         "-p", "no:cacheprovider", "-p", "no:randomly", "-c", os.devnull,
         "--rootdir", str(tmp_path), *(workers or []), str(test)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@WORKERS
def test_a_run_whose_relay_logged_a_token_fails(tmp_path: Path, workers: list[str]) -> None:
    result = run_pytest(tmp_path, PLANTED_IN_PROCESS, workers)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 passed" in result.stdout  # the test itself passed: the scan failed the run
    assert "relay log leaks" in result.stdout
    assert "in-process log:" in result.stdout and "<stack TOKEN>" in result.stdout
    assert stack.TOKEN not in result.stdout


@WORKERS
def test_a_run_whose_relay_subprocess_printed_a_key_fails(
    tmp_path: Path, workers: list[str]
) -> None:
    result = run_pytest(tmp_path, PLANTED_IN_SUBPROCESS, workers)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "relay-1.stderr:" in result.stdout and "<OPENAI_API_KEY>" in result.stdout
    assert "sk-planted-in-a-subprocess-0123" not in result.stdout


@WORKERS
def test_a_clean_run_passes_and_says_what_it_scanned(tmp_path: Path, workers: list[str]) -> None:
    result = run_pytest(tmp_path, CLEAN, workers)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "relay log scan: 0 secrets or ciphertexts in 1 in-process lines" in result.stdout
