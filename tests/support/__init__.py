"""Helpers shared by test modules and the benchmark: no test module imports another, so
whatever two of them need lives here (fixtures shared by a whole directory live in its
``conftest.py``)."""
