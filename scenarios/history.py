"""The event log of one scenario run: what happened, in order, as JSON lines.

Every run records what the client sent and got, what the fake upstream received and sent
(from ``GET /__fake/requests``), every process start and exit, and every injected fault.
:mod:`scenarios.checker` judges the run from this log alone (Jepsen's "record a history,
check it against a model afterwards"), so a check can be re-run on an old log, and a
unit test can feed the checker a hand-made or mutated log.

Event kinds and their main fields (all events also carry ``seq`` and ``t``, seconds on the
harness's monotonic clock since the run started):

- ``run_start``: scenario, seed.
- ``process_start``: role (relay|fake), pid, incarnation, cache_enabled, crash_at, wrappers.
- ``process_exit``: role, pid, incarnation, returncode, cause
  (harness_kill|harness_stop|crash_point|unexpected), stderr_tail.
- ``fault``: fault (kill, crash_point_armed, wall_jump, monotonic_advance, disk_fill, ...).
- ``client_request``: turn, conversation, stream, body.
- ``client_answer``: turn, status, outcome (success|error|cut|disconnected), text,
  tool_calls, finish_reason, frames, done, error.
- ``upstream_exchange``: index, body, continuity, sent — one per request the fake got.
- ``relay_event``: event, fields — parsed ``relay <event> k=v`` lines from the relay's stderr.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KINDS = frozenset(
    {
        "run_start",
        "process_start",
        "process_exit",
        "fault",
        "client_request",
        "client_answer",
        "upstream_exchange",
        "relay_event",
        "note",
    }
)


@dataclass(frozen=True)
class Event:
    seq: int
    t: float
    kind: str
    data: dict[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def to_json(self) -> str:
        return json.dumps(
            {"seq": self.seq, "t": round(self.t, 6), "kind": self.kind, **self.data},
            ensure_ascii=False,
            sort_keys=True,
            default=str,
        )

    @classmethod
    def from_json(cls, line: str) -> Event:
        raw = json.loads(line)
        seq, t, kind = raw.pop("seq"), raw.pop("t"), raw.pop("kind")
        return cls(int(seq), float(t), str(kind), raw)


@dataclass
class History:
    """Append-only, thread-safe (concurrent turns record from worker threads)."""

    path: Path | None = None
    events: list[Event] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _t0: float = field(default_factory=time.monotonic, repr=False)

    def record(self, kind: str, **data: Any) -> Event:
        if kind not in KINDS:
            raise ValueError(f"unknown history event kind {kind!r}; add it to history.KINDS")
        with self._lock:
            event = Event(len(self.events), time.monotonic() - self._t0, kind, data)
            self.events.append(event)
            if self.path is not None:
                # Written as we go, so a harness that dies mid-run still leaves its log.
                with self.path.open("a", encoding="utf-8") as out:
                    out.write(event.to_json() + "\n")
        return event

    def of(self, kind: str) -> list[Event]:
        return [event for event in self.events if event.kind == kind]

    def __iter__(self) -> Iterator[Event]:
        return iter(list(self.events))

    def __len__(self) -> int:
        return len(self.events)

    @classmethod
    def load(cls, path: Path) -> History:
        events = [
            Event.from_json(line)
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
        return cls(path=None, events=events)

    @classmethod
    def from_events(cls, events: list[tuple[str, dict[str, Any]]]) -> History:
        """Build a history by hand (unit tests of the checker)."""
        history = cls()
        for kind, data in events:
            history.record(kind, **data)
        return history
