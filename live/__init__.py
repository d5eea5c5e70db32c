"""Acceptance runs through a real relay subprocess: against the OpenAI API
(``nox -s live``) or the fake upstream (``nox -s live -- --offline``). See the README's
"Live acceptance" section and docs/live-acceptance.md."""
