"""The scenario harness: drive real relay and fake-upstream processes through faults,
record a history, and check it. Start with :mod:`scenarios.dsl` and docs/development.md,
"Writing a scenario"."""
