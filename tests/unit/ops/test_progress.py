"""The offline commands' progress on stderr: a bar redrawn in place on a terminal, plain
lines now and then otherwise, and always the end."""

from __future__ import annotations

import io

from relay.ops.progress import BAR_WIDTH, LINE_EVERY_S, REDRAW_S, ProgressReport


class Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_terminal_gets_one_bar_redrawn_at_most_every_tenth_of_a_second() -> None:
    stream, clock = Stream(tty=True), Clock()
    report = ProgressReport(stream, "copying", "pages", clock=clock)
    report.update(0, 40)
    clock.now += REDRAW_S / 2
    report.update(10, 40)  # too soon: not drawn
    clock.now += REDRAW_S
    report.update(20, 40)
    report.update(40, 40)  # the end is always drawn
    report.done()
    frames = stream.getvalue().split("\r")[1:]
    assert frames[-1].endswith("\n") and "\n" not in "".join(frames[:-1])
    assert [frame.split("] ")[1].strip() for frame in frames] == [
        "0/40 pages (0%)", "20/40 pages (50%)", "40/40 pages (100%)",
    ]  # fmt: skip
    assert frames[1].startswith("copying [" + "#" * (BAR_WIDTH // 2) + "-" * (BAR_WIDTH // 2))


def test_anything_else_gets_plain_lines_every_few_seconds_and_the_last_one() -> None:
    stream, clock = Stream(tty=False), Clock()
    report = ProgressReport(stream, "checking", "records", clock=clock)
    for done in range(0, 1001, 100):
        report.update(done, 1000)
        clock.now += LINE_EVERY_S / 2
    report.done()
    assert stream.getvalue().splitlines() == [
        "checking: 0/1000 records (0%)",
        "checking: 200/1000 records (20%)",
        "checking: 400/1000 records (40%)",
        "checking: 600/1000 records (60%)",
        "checking: 800/1000 records (80%)",
        "checking: 1000/1000 records (100%)",
    ]
    assert "\r" not in stream.getvalue()
