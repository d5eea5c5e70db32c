"""The scenario harness: drive real relay and fake-upstream processes through faults,
record a history, and check it. Start with :mod:`scenarios.dsl` and the README section
"Writing a scenario"."""
