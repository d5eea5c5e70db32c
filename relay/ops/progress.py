"""Progress of a long offline command on stderr: a bar redrawn in place on a terminal,
plain lines now and then otherwise (a log file or a pipe keeps every line it gets)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, TextIO

BAR_WIDTH: Final = 30
REDRAW_S: Final = 0.1  # a terminal bar at most this often
LINE_EVERY_S: Final = 5.0  # a plain line at most this often (and always at the end)


class ProgressReport:
    """``update(done, total)`` as often as the work likes; this decides what to show."""

    def __init__(
        self,
        stream: TextIO,
        label: str,
        unit: str,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._label = label
        self._unit = unit
        self._clock = clock
        self._tty = stream.isatty()
        self._shown_at: float | None = None
        self._drawn = False
        self._last: tuple[int, int] | None = None

    def update(self, done: int, total: int) -> None:
        now = self._clock()
        finished = total > 0 and done >= total
        if (done, total) == self._last:
            return
        wait = REDRAW_S if self._tty else LINE_EVERY_S
        if not finished and self._shown_at is not None and now - self._shown_at < wait:
            return
        self._shown_at, self._last = now, (done, total)
        share = 1.0 if total <= 0 else min(1.0, done / total)
        counts = f"{done}/{total} {self._unit} ({share:.0%})"
        if self._tty:
            filled = round(share * BAR_WIDTH)
            bar = "#" * filled + "-" * (BAR_WIDTH - filled)
            self._stream.write(f"\r{self._label} [{bar}] {counts}")
            self._drawn = True
        else:
            self._stream.write(f"{self._label}: {counts}\n")
        self._stream.flush()

    def done(self) -> None:
        """End the bar's line (a plain report has nothing to end)."""
        if self._drawn:
            self._stream.write("\n")
            self._stream.flush()
            self._drawn = False
