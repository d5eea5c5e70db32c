"""``nox -s bench``: ratios measured in one run (``python -m bench --help``)."""
