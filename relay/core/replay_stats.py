"""Replay outcomes counted since startup, per scope kind and model (pure, in memory).

A request that goes upstream with at least one replayed block is *dispatched*; it is
*accepted* when the upstream answers it 2xx, *rejected* (by :class:`RejectionKind`) when
the upstream refuses the replayed state, and *resent* when the relay then sends it once
more without replay. The scope kind is the request's body shape (``chat`` or
``responses``). Labels are bounded: shapes, configured model names and rejection kinds.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from relay.core.rejection import RejectionKind

Outcome = Literal["dispatched", "accepted", "resent"]


@dataclass
class ReplayStats:
    outcomes: Counter[tuple[str, str, Outcome]] = field(default_factory=Counter)
    rejected: Counter[tuple[str, str, RejectionKind]] = field(default_factory=Counter)

    def count(self, kind: str, model: str, outcome: Outcome) -> None:
        self.outcomes[kind, model, outcome] += 1

    def count_rejected(self, kind: str, model: str, reason: RejectionKind) -> None:
        self.rejected[kind, model, reason] += 1

    def to_json(self) -> dict[str, Any]:
        """Totals, rejections by reason, and one row per (kind, model) seen."""
        rows: dict[tuple[str, str], dict[str, Any]] = {}

        def row(kind: str, model: str) -> dict[str, Any]:
            return rows.setdefault(
                (kind, model),
                {"kind": kind, "model": model, "dispatched": 0, "accepted": 0,
                 "rejected": {}, "resent": 0},
            )  # fmt: skip

        for (kind, model, outcome), n in self.outcomes.items():
            row(kind, model)[outcome] += n
        by_reason: Counter[str] = Counter()
        for (kind, model, reason), n in self.rejected.items():
            row(kind, model)["rejected"][reason.value] = n
            by_reason[reason.value] += n
        totals = Counter({outcome: 0 for outcome in ("dispatched", "accepted", "resent")})
        for (_, _, outcome), n in self.outcomes.items():
            totals[outcome] += n
        return {
            "dispatched": totals["dispatched"],
            "accepted": totals["accepted"],
            "rejected": sum(by_reason.values()),
            "resent": totals["resent"],
            "rejectedByReason": dict(sorted(by_reason.items())),
            "byScope": [rows[key] for key in sorted(rows)],
        }
