"""Per-check results, the replay accounting from the relay's own log, the summary table
and the JSON file under ``live-results/``.

*Dispatched* counts blocks the relay put into an upstream request (``cache_plan
replayed=N``); *accepted* counts those whose request the upstream answered through to
the end (``chat_done``) without a ``replay_rejected`` for it. A dispatched block is not
an acceptance by itself: only the upstream's answer is. When the relay exposes
``stats.replay`` in ``/api/cache/reasoning`` its own counters are reported too.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from live.budget import RequestRecord
from live.processes import Event, RelayProcess


@dataclass
class ReplayCount:
    dispatched_blocks: int = 0
    dispatched_requests: int = 0
    accepted_blocks: int = 0
    accepted_requests: int = 0
    rejected_requests: int = 0  # replay_rejected logged
    relay_counters: dict[str, int] | None = None  # stats.replay summed over incarnations

    def add_events(self, events: Sequence[Event]) -> None:
        done = {f.get("request_id") for e, f in events if e == "chat_done"}
        rejected = {f.get("request_id") for e, f in events if e == "replay_rejected"}
        for event, fields in events:
            if event != "cache_plan":
                continue
            blocks = int(fields.get("replayed", "0") or 0)
            if not blocks:
                continue
            request_id = fields.get("request_id")
            self.dispatched_blocks += blocks
            self.dispatched_requests += 1
            if request_id in rejected:
                self.rejected_requests += 1
            elif request_id in done:
                self.accepted_blocks += blocks
                self.accepted_requests += 1

    def add_counters(self, counters: Iterable[dict[str, int]]) -> None:
        for one in counters:
            total = Counter(self.relay_counters or {})
            total.update(one)
            self.relay_counters = dict(total)


def replay_count(relays: Iterable[RelayProcess]) -> ReplayCount:
    count = ReplayCount()
    for relay in relays:
        count.add_events(relay.events())
        count.add_counters(relay.replay_counters)
    return count


@dataclass
class CheckResult:
    name: str
    title: str
    status: str  # passed | failed | skipped | not_run
    reason: str
    seconds: float = 0.0
    requests: list[RequestRecord] = field(default_factory=list)
    replay: ReplayCount = field(default_factory=ReplayCount)

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.requests)

    @property
    def estimated(self) -> bool:
        return any(r.estimated for r in self.requests)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "status": self.status,
            "reason": self.reason,
            "seconds": round(self.seconds, 3),
            "request_count": len(self.requests),
            "tokens": self.tokens,
            "tokens_estimated": self.estimated,
            "requests": [r.to_json() for r in self.requests],
            "replay": asdict(self.replay),
        }


@dataclass
class RunReport:
    mode: str
    model: str
    seed: int
    max_requests: int
    max_tokens: int
    results: list[CheckResult] = field(default_factory=list)
    budget_stop: str | None = None
    json_path: Path | None = None
    log_dir: Path | None = None

    @property
    def requests(self) -> int:
        return sum(len(r.requests) for r in self.results)

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.results)

    @property
    def ok(self) -> bool:
        return self.budget_stop is None and all(
            r.status in ("passed", "skipped") for r in self.results
        )

    def result(self, name: str) -> CheckResult:
        for result in self.results:
            if result.name == name:
                return result
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "model": self.model,
            "seed": self.seed,
            "budget": {"max_requests": self.max_requests, "max_tokens": self.max_tokens},
            "budget_stop": self.budget_stop,
            "totals": {
                "checks": len(self.results),
                "passed": sum(r.status == "passed" for r in self.results),
                "failed": sum(r.status == "failed" for r in self.results),
                "skipped": sum(r.status == "skipped" for r in self.results),
                "not_run": sum(r.status == "not_run" for r in self.results),
                "requests": self.requests,
                "tokens": self.tokens,
            },
            "checks": [r.to_json() for r in self.results],
        }

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
        self.json_path = path


def render_table(report: RunReport) -> str:
    """The summary as a Markdown table, with a totals line."""
    header = ("check", "result", "requests", "tokens", "replay dispatched", "accepted", "reason")
    rows = [header, tuple("---" for _ in header)]
    for r in report.results:
        tokens = f"{r.tokens}{'*' if r.estimated else ''}"
        counters = r.replay.relay_counters
        accepted = f"{r.replay.accepted_blocks}"
        if counters:
            accepted += f" (relay: {counters.get('accepted', 0)}/{counters.get('dispatched', 0)})"
        rows.append(
            (
                r.name,
                r.status,
                str(len(r.requests)),
                tokens,
                str(r.replay.dispatched_blocks),
                accepted,
                r.reason.replace("|", "/").replace("\n", " "),
            )
        )
    lines = ["| " + " | ".join(row) + " |" for row in rows]
    passed = sum(r.status == "passed" for r in report.results)
    lines.append("")
    lines.append(
        f"{report.mode} run, model {report.model}, seed {report.seed}: {passed}/"
        f"{len(report.results)} passed, {report.requests} requests, {report.tokens} tokens "
        f"(budget {report.max_requests} requests / {report.max_tokens} tokens)"
    )
    if any(r.estimated for r in report.results):
        lines.append("* includes an upper-bound estimate for a request that reported no usage")
    if report.budget_stop:
        lines.append(f"stopped: {report.budget_stop}")
    return "\n".join(lines)
