"""Fixtures and plugins of the whole suite.

Every relay log line of the run is scanned for the run's secrets and for ciphertext; a
leak fails the run (tests/support/log_leaks.py). A throwaway PostgreSQL cluster is there for
the tests that ask for one (tests/support/pg_cluster.py).

Hypothesis runs without its per-example deadline: 200 ms of wall time measures the machine,
not the code, and a loaded 2-core machine running the suite in parallel workers exceeds it
at random (a test that is about time says so with its own assertions).
"""

from hypothesis import settings

pytest_plugins = (
    "tests.support.log_leaks",
    "tests.support.pg_cluster",
    "tests.support.summary_tables",
    "tests.support.xdist_groups",
)

settings.register_profile("suite", deadline=None)
settings.load_profile("suite")
