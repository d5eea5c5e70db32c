"""Developer and CI sessions. ``nox`` alone runs the offline test suite."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

# Debian packages the tests drive, by the program each provides: the scenario harness's clock
# jumps and I/O fault injection; team deployment's real components (a throwaway PostgreSQL
# cluster, haproxy in front of several relays: tests/support/pg_cluster.py, haproxy.py).
SYSTEM_PACKAGES = {
    "faketime": "faketime",
    "fiu-run": "fiu-utils",
    "strace": "strace",
    "initdb": "postgresql",
    "pg_ctl": "postgresql",
    "haproxy": "haproxy",
}
# Off PATH where Debian puts them: PostgreSQL's server programs (one directory per major
# version) and, for a user whose PATH lacks the sbin directories, haproxy.
TOOL_DIRS = ("/usr/lib/postgresql/*/bin", "/usr/sbin", "/sbin")
COVERAGE_FAIL_UNDER = "85"
# pytest-xdist workers of `tests`: most tests wait on sockets and subprocesses, so more
# workers than the 2 cores we measure on still gain (docs/design.md, "The test suite's
# time"). `nox -s tests -- -n 0` runs in one process. The loadgroup scheduler is the
# suite's (tests/support/xdist_groups.py): a few modules each stay on one worker.
TEST_WORKERS = ("-n", "3", "--dist", "loadgroup")
# Bytecode caches on, whatever the caller's environment says (an empty value is unset):
# each worker would rewrite every test module's asserts again, and each of the suite's
# hundreds of relay and fake processes would compile the project again.
BYTECODE = {"PYTHONDONTWRITEBYTECODE": ""}
# Run a second time by `tests` with RELAY_TEST_FORCE_PORTABLE_FALLBACKS=1 (relay.storage.portable).
PORTABLE_TESTS = ("tests/unit/storage", "tests/unit/cache/test_disk_safety.py")
SYSTEM_PACKAGES["chromium"] = "chromium"  # the dashboard's browser test (tests/support/browser.py)


def ensure_system_packages(session: nox.Session) -> None:
    """Install missing Debian packages when we can (root + apt); otherwise say what is missing.

    Tests that need a missing tool skip with that tool's name; nothing else is affected.
    """
    missing = sorted({pkg for tool, pkg in SYSTEM_PACKAGES.items() if not tool_found(tool)})
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        session.warn(f"missing Debian packages {missing}; scenarios needing them will skip")
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, timeout=300)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
            check=True,
            env=env,
            timeout=600,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        session.warn(f"could not install {missing} ({exc}); scenarios needing them will skip")


def tool_found(tool: str) -> bool:
    if shutil.which(tool) is not None:
        return True
    return any(os.access(os.path.join(d, tool), os.X_OK) for p in TOOL_DIRS for d in glob.glob(p))


def install_project(session: nox.Session, *extras: str) -> None:
    spec = f".[{','.join(extras)}]" if extras else "."
    session.install("-e", spec)


@nox.session
def tests(session: nox.Session) -> None:
    """The offline suite: unit, integration and the fast scenarios (never a real API)."""
    ensure_system_packages(session)
    install_project(session, "test")
    session.run("pytest", *TEST_WORKERS, "-m", "not slow", *session.posargs, env=BYTECODE)
    if not session.posargs:
        # The storage and disk-safety unit tests again with the platform fallbacks forced
        # (relay.storage.portable): what macOS preallocates with, on a Linux CI.
        session.run(
            "pytest", *TEST_WORKERS, "-q", *PORTABLE_TESTS,
            env={**BYTECODE, "RELAY_TEST_FORCE_PORTABLE_FALLBACKS": "1"},
        )  # fmt: skip


@nox.session
def scenarios(session: nox.Session) -> None:
    """Every scenario, including the slow ones and the longer state-machine budget."""
    ensure_system_packages(session)
    install_project(session, "test")
    session.run(
        "pytest",
        "-m",
        "scenario",
        "tests/scenarios",
        *session.posargs,
        env={"RELAY_SCENARIO_BUDGET": "long"},
    )
    # The fuzz again, ten times as long (the fast suite sends 5,000 requests).
    session.run(
        "pytest",
        "tests/integration/test_fuzz.py",
        *session.posargs,
        env={"RELAY_SCENARIO_BUDGET": "long"},
    )
    # The replay state machine again, with its long budget (the fast suite runs a short one).
    session.run(
        "pytest",
        "tests/unit/cache/test_replay_state_machine.py",
        *session.posargs,
        env={"RELAY_SCENARIO_BUDGET": "long"},
    )


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (style, format) and the import contracts in setup.cfg (import-linter)."""
    session.install("ruff>=0.5", "import-linter>=2")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", "--diff", ".")
    install_project(session)  # the contracts read the installed packages' imports
    session.run("lint-imports")


@nox.session
def typecheck(session: nox.Session) -> None:
    install_project(session, "test", "dev")
    session.run("mypy")


@nox.session
def coverage(session: nox.Session) -> None:
    ensure_system_packages(session)
    install_project(session, "test")
    session.run("coverage", "erase")
    # The xdist workers are measured like every other subprocess: coverage's .pth file
    # starts it in each (COVERAGE_PROCESS_START), parallel = true keeps their data apart.
    session.run(
        "coverage",
        "run",
        "-m",
        "pytest",
        *TEST_WORKERS,
        "-m",
        "not slow",
        *session.posargs,
        env={**BYTECODE, "COVERAGE_PROCESS_START": "setup.cfg"},
    )
    session.run("coverage", "combine", success_codes=[0, 1])
    session.run("coverage", "report", f"--fail-under={COVERAGE_FAIL_UNDER}")


@nox.session
def serve(session: nox.Session) -> None:
    """Run the relay; with no OPENAI_API_KEY it answers from the built-in fake upstream."""
    install_project(session)
    session.run("relay", "serve", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Ratios measured in one run: relay (cache off and on) vs direct-to-fake (the time the
    relay adds to the first content byte, small history, 201 and 1,000 messages), the
    cache's own share, the same added time beside a bare TCP hop (the floor of any proxy),
    identity and the cache path vs json.loads, canonical hashing vs the stdlib floor,
    SQLite commit costs. Markdown tables on stdout, JSON in bench-results/bench.json, the
    cache-on relay's cProfile stats beside it. Pass options after ``--`` (``nox -s bench
    -- --profile`` adds cProfile tables, ``--help`` lists them)."""
    install_project(session, "test")
    session.run("python", "-m", "bench", *session.posargs)


LITELLM = "litellm[proxy]==1.110.2"  # the bridge bench_litellm compares against


@nox.session
def bench_litellm(session: nox.Session) -> None:
    """``bench`` with LiteLLM joining its TCP-hop comparison: the relay's added time to
    first token against LiteLLM's Chat→Responses bridge on the same fake upstream (issue
    29's "about 0.1x of LiteLLM's added cost"). LiteLLM goes into a virtualenv of its own
    (its dependencies are not the relay's); options after ``--`` go to ``python -m
    bench``."""
    install_project(session, "test")
    proxy_env = Path(session.virtualenv.location).parent / "litellm-proxy"
    if not (proxy_env / "bin" / "litellm").exists():
        session.run("python", "-m", "venv", str(proxy_env))
        session.run(str(proxy_env / "bin" / "pip"), "install", "-q", LITELLM, external=True)
    session.run("python", "-m", "bench", "--litellm", str(proxy_env / "bin" / "litellm"),
                *session.posargs)  # fmt: skip


@nox.session
def live(session: nox.Session) -> None:
    """Acceptance checks through a real relay subprocess against the real OpenAI API (needs
    OPENAI_API_KEY, else skipped); ``-- --offline`` runs them against the fake upstream.
    Options after ``--`` (``--max-requests``, ``--max-tokens``, ``--record DIR``, ``--only``,
    ``--help``); results in live-results/."""
    if "--offline" not in session.posargs and not os.environ.get("OPENAI_API_KEY"):
        session.skip(
            "OPENAI_API_KEY is not set; `nox -s live -- --offline` runs the same checks "
            "against the fake upstream"
        )
    install_project(session, "test")
    session.run("python", "-m", "live", *session.posargs)
