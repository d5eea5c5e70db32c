"""A played scenario's recorded history as events, and a mutated copy loaded back: how the
checker tests show a check fails on a real run edited in one place."""

from __future__ import annotations

import json
from typing import Any

from scenarios.history import History
from scenarios.play import PlayResult


def recorded_events(result: PlayResult) -> list[dict[str, Any]]:
    """The run's ``history.jsonl`` (kept with ``keep=True``), one dict per event."""
    path = result.run_dir / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def load_mutated(result: PlayResult, events: list[dict[str, Any]]) -> History:
    """``events`` written beside the run's history and loaded as a History."""
    mutated = result.run_dir / "mutated.jsonl"
    mutated.write_text("\n".join(json.dumps(event) for event in events))
    return History.load(mutated)
