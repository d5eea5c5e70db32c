"""What a check concludes: passed, failed or skipped, with a reason that says why."""

from __future__ import annotations

from dataclasses import dataclass


class CheckFailed(AssertionError):
    """An expectation of a check did not hold; the message is the check's reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Verdict:
    status: str  # passed | failed | skipped
    reason: str


def passed(reason: str) -> Verdict:
    return Verdict("passed", reason)


def skipped(reason: str) -> Verdict:
    return Verdict("skipped", reason)


def expect(condition: object, reason: str) -> None:
    """Fail the check with ``reason`` unless ``condition`` holds."""
    if not condition:
        raise CheckFailed(reason)
