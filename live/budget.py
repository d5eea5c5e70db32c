"""The run's spending limit and the record of every model request a check made.

A request is charged before it is sent (one request) and after it ends (its tokens, from
``usage``). When a limit is reached the next request raises :class:`BudgetExhausted`
instead of going out: the run stops there, nothing is retried.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any


class BudgetExhausted(RuntimeError):
    """The next request would go over the run's request or token limit."""


@dataclass
class RequestRecord:
    """One model request, as the check saw it."""

    label: str
    kind: str  # relay | direct | provider
    stream: bool
    status: int | None = None  # HTTP status; None: no answer (connection failure)
    request_id: str | None = None  # the relay's x-request-id
    tokens: int = 0
    # True when usage was not reported (a cancelled stream): ``tokens`` is then the
    # request's output cap plus an input estimate, an upper bound charged to the budget.
    estimated: bool = False
    finish_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Budget:
    def __init__(self, max_requests: int, max_tokens: int) -> None:
        self.max_requests = max_requests
        self.max_tokens = max_tokens
        self.requests = 0
        self.tokens = 0
        self.stopped: str | None = None  # why the run stopped, once it has
        self._lock = threading.Lock()  # concurrent checks charge from several threads

    def before_request(self, label: str) -> None:
        with self._lock:
            if self.requests >= self.max_requests:
                self.stopped = f"request budget of {self.max_requests} spent (before {label!r})"
            elif self.tokens >= self.max_tokens:
                self.stopped = f"token budget of {self.max_tokens} spent (before {label!r})"
            if self.stopped is not None:
                raise BudgetExhausted(self.stopped)
            self.requests += 1

    def charge_tokens(self, tokens: int) -> None:
        with self._lock:
            self.tokens += tokens


class Ledger:
    """The requests of one check, in the order they were sent."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.records: list[RequestRecord] = []
        self._lock = threading.Lock()

    def open(self, label: str, kind: str, *, stream: bool) -> RequestRecord:
        self.budget.before_request(label)
        record = RequestRecord(label=label, kind=kind, stream=stream)
        with self._lock:
            self.records.append(record)
        return record

    def close(self, record: RequestRecord, tokens: int, *, estimated: bool = False) -> None:
        record.tokens, record.estimated = tokens, estimated
        self.budget.charge_tokens(tokens)

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.records)
