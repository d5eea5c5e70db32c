"""Opt-in acceptance runs against the real OpenAI API (``nox -s live``)."""
