"""Fixtures and plugins of the whole suite.

Every relay log line of the run is scanned for the run's secrets and for ciphertext; a
leak fails the run (tests/support/log_leaks.py). A throwaway PostgreSQL cluster is there for
the tests that ask for one (tests/support/pg_cluster.py).
"""

pytest_plugins = ("tests.support.log_leaks", "tests.support.pg_cluster")
