"""Every relay log line the test run produces, scanned for the run's secrets (a pytest plugin).

The relay must never log a credential, a token or ciphertext (relay/observability/log.py). This plugin
gathers what it logged during the whole session and fails the run if any of it holds:

- a *secret* of the run: the suite's fixed tokens and keys (``tests.support.stack``, the
  embedded fake's key), every relay token, admin token and upstream or provider key an
  in-process relay was started with (read from its config when ``RelayServer.start``
  returns, the generated token included), and those of every relay subprocess (the
  ``*_TOKEN``/``*_KEY``/``*SECRET*`` values in its environment, and its generated
  ``relay-token`` file);
- *ciphertext*: the fake upstream's ``encrypted_content`` tokens are Fernet-shaped,
  url-safe base64 starting ``gAAAAA`` (fakeupstream/ciphertext.py), like OpenAI's.

Sources: records of the ``relay`` logger (set to DEBUG for the session, so every event is
rendered) and WARNING-and-up records of every other logger, rendered by the relay's own
text formatter; the stdout and stderr of every relay subprocess the scenario and live
harnesses ran (``scenarios.procs.EXIT_OBSERVERS``, read as each one exits, before its run
directory is removed), and those tests that run ``relay serve`` themselves hand over
(:func:`observe_process`). Subprocess output is scanned as it arrives, against the
secrets known by then (a secret made later cannot be in it); in-process lines are kept and
scanned at the end against every secret.

Findings are reported with the secret masked; any finding makes the run fail. Under
pytest-xdist each worker scans its own share and hands its findings to the controller,
which reports them all and fails the run.
``tests/unit/observability/test_log_leaks.py`` plants secrets to show that it does.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from relay.observability.log import TextFormatter

# Shorter values are not treated as secrets: a test's "sk-x" would match innocent text.
MIN_SECRET_CHARS = 12
CIPHERTEXT = re.compile(r"gAAAAA[A-Za-z0-9_\-]{20,}=*")
SECRET_NAME = re.compile(r"(TOKEN|_KEY|SECRET)", re.IGNORECASE)
PLUGIN_NAME = "relay_log_leaks"


@dataclass(frozen=True)
class Finding:
    source: str
    what: str  # the secret's label, or "ciphertext"
    line_no: int
    line: str  # the offending line, the secret masked

    def __str__(self) -> str:
        return f"{self.source}:{self.line_no}: {self.what}: {self.line}"


class LeakScanner:
    """Finds known secrets and ciphertext in log text."""

    def __init__(self, secrets: Mapping[str, str] | None = None) -> None:
        self.secrets: dict[str, str] = {}  # value -> label
        for label, value in (secrets or {}).items():
            self.add(label, value)

    def add(self, label: str, value: str | None) -> None:
        if value and len(value) >= MIN_SECRET_CHARS and value not in self.secrets:
            self.secrets[value] = label

    def scan(self, source: str, text: str, extra: Mapping[str, str] | None = None) -> list[Finding]:
        secrets = dict(self.secrets)
        for value, label in (extra or {}).items():
            if len(value) >= MIN_SECRET_CHARS:
                secrets.setdefault(value, label)
        hits: list[tuple[int, int, str]] = []  # (start, end, what)
        for value, label in secrets.items():
            start = text.find(value)
            while start >= 0:
                hits.append((start, start + len(value), label))
                start = text.find(value, start + 1)
        hits += [(m.start(), m.end(), "ciphertext") for m in CIPHERTEXT.finditer(text)]
        return [self._finding(source, text, start, end, what) for start, end, what in hits]

    @staticmethod
    def _finding(source: str, text: str, start: int, end: int, what: str) -> Finding:
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", end)
        line_end = len(text) if line_end < 0 else line_end
        masked = text[line_start:start] + f"<{what}>" + text[end:line_end]
        return Finding(source, what, text.count("\n", 0, start) + 1, masked[:300])


def secrets_in_env(env: Mapping[str, str]) -> dict[str, str]:
    """``{value: name}`` of the variables that hold credentials, by their names."""
    return {value: name for name, value in env.items() if SECRET_NAME.search(name) and value}


class _Lines(logging.Handler):
    """Renders every record it gets with the relay's text formatter and keeps the line."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(TextFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if (
            record.name != "relay"
            and not record.name.startswith("relay.")
            and (record.levelno < logging.WARNING)
        ):
            return
        try:
            self.lines.append(self.format(record))
        except Exception:
            self.lines.append(f"<unformattable record from {record.name}>")


class LogCollector:
    """The session's log lines and findings."""

    def __init__(self, scanner: LeakScanner) -> None:
        self.scanner = scanner
        self.handler = _Lines()
        self.findings: list[Finding] = []
        self.sources = 0
        self.subprocess_bytes = 0
        self.worker_lines = 0  # in-process lines the pytest-xdist workers scanned

    def observe_process(
        self,
        label: str,
        text: str,
        env: Mapping[str, str] | None = None,
        data_dir: Path | None = None,
    ) -> None:
        """Scan one relay process's output against the run's secrets and its own."""
        own = secrets_in_env(env or {})
        token = _generated_token(data_dir or _data_dir(env or {}))
        if token is not None:
            own[token] = "generated relay-token"
        for value, name in own.items():
            self.scanner.add(name, value)
        self.sources += 1
        self.subprocess_bytes += len(text)
        self.findings += self.scanner.scan(label, text, own)

    def observe_managed(self, proc: Any) -> None:
        """``scenarios.procs.EXIT_OBSERVERS`` callback: a relay subprocess has exited."""
        if proc.role != "relay":
            return
        text = proc.stdout_text() + proc.stderr_text()
        self.observe_process(f"{proc.role} {proc.stderr_path}", text, proc.env)

    def register_relay(self, relay: Any) -> None:
        """The secrets of an in-process relay (its config and runtime), once started."""
        config = relay.config
        self.scanner.add("RELAY_TOKEN", config.relay_token)
        self.scanner.add("RELAY_ADMIN_TOKEN", config.admin_token)
        self.scanner.add("OPENAI_API_KEY", config.openai_api_key)
        for provider in config.providers.values():
            self.scanner.add(provider.api_key_env, provider.api_key)
        runtime = relay.runtime
        if runtime is not None:
            self.scanner.add("relay token", runtime.relay_token)
            self.scanner.add("upstream key", runtime.upstream_api_key)

    def finish(self) -> list[Finding]:
        """Scan the in-process lines against every secret; all findings of the run."""
        self.sources += 1
        self.findings += self.scanner.scan("in-process log", "\n".join(self.handler.lines))
        return self.findings

    @property
    def lines(self) -> int:
        return len(self.handler.lines) + self.worker_lines

    def worker_summary(self) -> dict[str, Any]:
        """What a pytest-xdist worker scanned and found (after :meth:`finish`), in plain
        types for the controller, which alone reports and decides the run's status."""
        return {
            "findings": [[f.source, f.what, f.line_no, f.line] for f in self.findings],
            "lines": self.lines,
            "processes": self.sources - 1,
            "bytes": self.subprocess_bytes,
        }

    def merge_worker(self, summary: Mapping[str, Any]) -> None:
        self.findings += [Finding(*finding) for finding in summary["findings"]]
        self.worker_lines += summary["lines"]
        self.sources += summary["processes"]
        self.subprocess_bytes += summary["bytes"]


def _data_dir(env: Mapping[str, str]) -> Path | None:
    raw = env.get("RELAY_DATA_DIR")
    return Path(raw) if raw else None


def _generated_token(data_dir: Path | None) -> str | None:
    if data_dir is None:
        return None
    try:
        return (data_dir / "relay-token").read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def suite_secrets() -> dict[str, str]:
    """The suite's fixed credentials: ``{label: value}``."""
    from relay.app.server import EMBEDDED_FAKE_KEY
    from tests.support import stack

    return {
        "stack TOKEN": stack.TOKEN,
        "stack UPSTREAM_KEY": stack.UPSTREAM_KEY,
        "stack PROVIDER_KEY": stack.PROVIDER_KEY,
        "EMBEDDED_FAKE_KEY": EMBEDDED_FAKE_KEY,
    }


_ACTIVE: list[LogCollector] = []  # the session's collector, while the plugin is installed


def observe_process(
    label: str, text: str, env: Mapping[str, str] | None = None, data_dir: Path | None = None
) -> None:
    """For tests that run ``relay serve`` themselves: hand over what the process wrote."""
    for collector in _ACTIVE:
        collector.observe_process(label, text, env, data_dir)


class LogLeakPlugin:
    def __init__(self) -> None:
        self.collector = LogCollector(LeakScanner(suite_secrets()))
        self._undo: list[Callable[[], None]] = []

    def install(self) -> None:
        _ACTIVE[:] = [self.collector]
        root, relay_logger = logging.getLogger(), logging.getLogger("relay")
        root.addHandler(self.collector.handler)
        level = relay_logger.level
        relay_logger.setLevel(logging.DEBUG)
        self._undo.append(lambda: root.removeHandler(self.collector.handler))
        self._undo.append(lambda: relay_logger.setLevel(level))

        from scenarios import procs

        procs.EXIT_OBSERVERS.append(self.collector.observe_managed)
        self._undo.append(lambda: procs.EXIT_OBSERVERS.remove(self.collector.observe_managed))

        from relay.app.server import RelayServer

        original = RelayServer.start
        collector = self.collector

        async def start(server: RelayServer) -> int:
            port = await original(server)
            collector.register_relay(server)
            return port

        RelayServer.start = start  # type: ignore[method-assign,assignment]
        self._undo.append(lambda: setattr(RelayServer, "start", original))

    def uninstall(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()
        _ACTIVE.clear()

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        findings = self.collector.finish()
        # A pytest-xdist worker's exit status and terminal summary are dropped by the
        # controller: it hands its scan over (pytest_testnodedown below) instead.
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput[PLUGIN_NAME] = self.collector.worker_summary()
        if findings and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook, on the controller
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        summary = getattr(node, "workeroutput", {}).get(PLUGIN_NAME)
        if summary is not None:  # absent if the worker crashed before its session finished
            self.collector.merge_worker(summary)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        collector = self.collector
        findings = collector.findings
        if not findings:
            terminalreporter.write_line(
                f"relay log scan: 0 secrets or ciphertexts in {collector.lines} "
                f"in-process lines and {collector.sources - 1} relay processes "
                f"({collector.subprocess_bytes} bytes)"
            )
            return
        terminalreporter.section("relay log leaks", sep="=", red=True, bold=True)
        for finding in findings[:50]:
            terminalreporter.write_line(str(finding))
        terminalreporter.write_line(f"relay log scan: {len(findings)} leaks; the run fails")

    def pytest_unconfigure(self) -> None:
        self.uninstall()


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.has_plugin(PLUGIN_NAME):
        return
    plugin = LogLeakPlugin()
    plugin.install()
    config.pluginmanager.register(plugin, PLUGIN_NAME)
