"""Pure bookkeeping for status: totals over the last hour, errors by reason code, and
label bounding. Times are passed in (monotonic seconds for windows, wall for display)."""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

MAX_CODES: Final = 32  # distinct reason codes kept; later new ones count as "other"
_CODE: Final = re.compile(r"[a-z0-9_]{1,48}")


def bounded_code(code: str, known: set[str], limit: int = MAX_CODES) -> str:
    """A reason code safe as a metric label: lower-case ``[a-z0-9_]``, at most ``limit``
    distinct ones (an upstream can send any ``code`` string; an id must not become a
    label). ``known`` is the set seen so far, updated here."""
    if not _CODE.fullmatch(code):
        return "other"
    if code in known:
        return code
    if len(known) >= limit:
        return "other"
    known.add(code)
    return code


@dataclass
class CounterHistory:
    """Samples of ever-growing totals, one per ``every_s`` at most, so that the growth
    over the last ``span_s`` can be read without a timestamp per event. The answer is
    exact to one sampling interval; a process younger than the span reports since start."""

    span_s: float = 3600.0
    every_s: float = 60.0
    _samples: deque[tuple[float, dict[str, int]]] = field(default_factory=deque)

    def record(self, now: float, totals: Mapping[str, int]) -> None:
        if self._samples and now - self._samples[-1][0] < self.every_s:
            return
        self._samples.append((now, dict(totals)))
        # Keep one sample at or before the window's start (the baseline) and every later one.
        while len(self._samples) >= 2 and self._samples[1][0] <= now - self.span_s:
            self._samples.popleft()

    def growth(self, now: float, totals: Mapping[str, int]) -> tuple[dict[str, int], float]:
        """``totals`` minus the baseline, and the seconds that growth covers."""
        if not self._samples:
            return dict(totals), 0.0
        baseline_at, baseline = self._samples[0]
        for at, sample in self._samples:
            if at > now - self.span_s:
                break
            baseline_at, baseline = at, sample
        grown = {key: value - baseline.get(key, 0) for key, value in totals.items()}
        return grown, max(0.0, now - baseline_at)


@dataclass
class ErrorTally:
    """Failed requests by bounded reason code: how many, and when the last one was."""

    counts: Counter[str] = field(default_factory=Counter)
    last_at: dict[str, float] = field(default_factory=dict)
    _known: set[str] = field(default_factory=set)

    def add(self, code: str, wall: float) -> str:
        label = bounded_code(code, self._known)
        self.counts[label] += 1
        self.last_at[label] = wall
        return label

    def latest(self, limit: int = 8) -> list[dict[str, Any]]:
        """The most recently seen codes first."""
        codes = sorted(self.last_at, key=lambda c: self.last_at[c], reverse=True)[:limit]
        return [{"code": c, "count": self.counts[c], "lastAt": self.last_at[c]} for c in codes]
